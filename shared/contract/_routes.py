"""Who publishes each event that travels on its own (not as a request or reply), and who listens.

Requests name their service in the endpoint table (``shared.endpoints``); the
events below are published by a service on a subject their type gives (a
signal on ``jido.sig.<type>``, conversation output on
``jido.evt.<p>.<c>.<type>``), so the table here says who does it. A unit test
checks that it names every signal and conversation type of the catalogue and
that each named service's code really mentions the type it is said to send or
receive.

Parties are the service keys of ``subjects.SERVICE_NAMES``. Outside observers
(the SDK, ``jidocode watch``, an integrator on ``jido.>``) may follow any of
these; ``receivers`` lists only the services that act on an event.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType
from typing import Final

__all__ = ["INPUT_RECEIVERS", "NOT_JOURNALED", "OUTPUT_SENDERS", "SIGNALS", "Route"]


@dataclass(frozen=True)
class Route:
    """The services that publish an event type and those that subscribe to it."""

    senders: tuple[str, ...]
    receivers: tuple[str, ...] = ()


_CONV = ("conversation",)

#: Every lifecycle and telemetry signal (``jido.sig.<type>``).
SIGNALS: Final = MappingProxyType(
    {
        "project.started": Route(("engine",), ("asset_loader",)),
        "project.stopped": Route(("engine",), ("asset_loader", "conversation")),
        "project.assets_reloaded": Route(("asset_loader",), _CONV),
        "skill/registry/updated": Route(("asset_loader",), _CONV),
        "workflow.run.started": Route(("asset_loader",)),
        "workflow.run.step": Route(("asset_loader",)),
        "workflow.run.completed": Route(("asset_loader",)),
        "workflow.run.failed": Route(("asset_loader",)),
        "skill.route.completed": Route(("asset_loader",)),
        "skill.route.failed": Route(("asset_loader",)),
        "conversation.started": Route(_CONV),
        "conversation.stopped": Route(_CONV),
        "conversation.event_ingested": Route(_CONV),
        "llm.retrying": Route(_CONV),
        "llm.failed": Route(_CONV),
        "llm.budget.exceeded": Route(_CONV),
        "tool.started": Route(("tool_runner",)),
        "tool.completed": Route(("tool_runner",)),
        "tool.failed": Route(("tool_runner",)),
        "tool.cancel_requested": Route(("tool_runner",), ("tool_runner",)),
        "tool.network": Route(("tool_runner",)),
        # seed 000 §6 telemetry that had no signal of its own
        "project.assets_loaded": Route(("asset_loader",)),
        "assets.changed": Route(("asset_loader",)),
        "llm.started": Route(_CONV),
        "llm.delta": Route(_CONV),
        "llm.completed": Route(_CONV),
    }
)

#: Conversation output (``jido.evt.<p>.<c>.<type>``) published by another service than
#: the conversation service, which publishes every other conversation type.
OUTPUT_SENDERS: Final = MappingProxyType({"conversation.approval.requested": ("tool_runner",)})

#: Conversation output that is published live but never written to the journal.
NOT_JOURNALED: Final = frozenset({"conversation.assistant.delta"})

#: Who reads a conversation's input subject (``jido.conv.<p>.<c>.in``): the
#: conversation service (through the ``JIDO_CONV_IN`` stream) and the tool runner
#: (approval answers, while it waits for one).
INPUT_RECEIVERS: Final = MappingProxyType(
    {
        "conversation.user.message": _CONV,
        "conversation.cancel": _CONV,
        "conversation.resume": _CONV,
        "conversation.approval.response": ("conversation", "tool_runner"),
        "conversation.compact": _CONV,
        "conversation.rewind": _CONV,
    }
)
