"""The :class:`ToolPort` over NATS: the tool runner's ``run`` and ``cancel`` endpoints.

Errors never escape :meth:`NatsToolPort.run`: an unreachable or failing tool
runner becomes a failed :class:`ToolResult`, which the model sees as the
tool's answer.

A call survives a tool-runner restart: while nobody serves the project's
``run`` endpoint (``service_unavailable``: the runner is restarting, or every
replica is busy starting), the same request — the same ``meta.request_id``,
so the runner's idempotency ledger runs it at most once — is sent again with
backoff until a runner takes it or the call's deadline passes; only then is it
a failed result.

A call also survives a runner that dies holding it, and a reply lost while NATS
restarts: neither ever answers, so an attempt that hears nothing for
:data:`RESEND_S` is sent again — same request id, same deadline — for as long as
the call is unanswered. The runner's ledger makes the copy safe: it returns the
stored result, waits for the running call's result (a newer copy takes over the
wait of the one before, so copies do not pile up), or, for a call claimed by a
runner that is gone (it asks that runner), settles it at once — run once if it
never started, ``outcome_unknown`` if it had; the side effect never runs twice. A
short period is what makes a runner's death known within seconds of its restart
(issue 31, decision 0324): each copy costs one request and one KV read.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import nats.errors

from jidocode.shared.bus import Bus
from jidocode.shared.clients import ProjectClient, ToolsClient
from jidocode.shared.errors import JidoError, RequestTimeout, ServiceUnavailable
from jidocode.shared.events.conversation import UserMessage
from jidocode.shared.events.tools import (
    TURN_LABEL_MAX,
    ToolCallMeta,
    ToolResult,
    ToolResultError,
)

from .core import ConversationState
from .ports import LlmToolSpec

__all__ = [
    "RESEND_S",
    "RETRY_FIRST_S",
    "RETRY_MAX_S",
    "NatsToolPort",
    "list_tool_specs",
    "turn_of",
]

log = logging.getLogger("jidocode.conversation.tools")

#: Backoff between the attempts of a call nobody serves: first delay, doubling up to the cap.
RETRY_FIRST_S = 0.1
RETRY_MAX_S = 2.0
#: An attempt that hears nothing for this long is sent again (same request id), as long as the
#: call is unanswered: the bound on how late a dead runner's call is heard of after its restart.
RESEND_S = 5.0


class NatsToolPort:
    def __init__(self, bus: Bus, *, timeout: float = 600.0, resend_after: float = RESEND_S) -> None:
        self.bus = bus
        self.timeout = timeout
        self.resend_after = resend_after

    async def run(self, project_id: str, name: str, args: dict[str, Any], meta: ToolCallMeta) -> ToolResult:
        deadline = time.monotonic() + self.timeout
        if meta.deadline is not None:
            deadline = min(deadline, time.monotonic() + (meta.deadline - time.time()))
        delay, attempts, resend, resent = RETRY_FIRST_S, 0, self.resend_after, 0
        client = ToolsClient(self.bus, project_id)
        while True:
            attempts += 1
            left = max(0.001, deadline - time.monotonic())
            try:
                return await client.run(
                    name,
                    args,
                    meta=meta,
                    timeout=left,
                    wait=min(left, resend),
                    conversation_id=meta.conversation_id,
                    correlation_id=meta.correlation_id,
                    causation_id=meta.causation_id,
                )
            except RequestTimeout as exc:
                if left <= resend:  # this attempt waited until the call's deadline
                    return _failed(exc, exc.message)
                resent += 1
                log.log(
                    logging.WARNING if resent == 1 else logging.DEBUG,  # a long call: said once
                    "tool call %s (%s) of project %s: no answer within %g s; sent again (copy %d), same request id",
                    meta.request_id,
                    name,
                    project_id,
                    resend,
                    resent,
                )
            except (ServiceUnavailable, nats.errors.Error, OSError) as raw:
                # nobody serves the endpoint, or the connection is down (a NATS restart: the
                # client's buffer is full or it is reconnecting): the same request again, later
                down = (
                    raw
                    if isinstance(raw, JidoError)
                    else ServiceUnavailable(f"NATS: {raw or type(raw).__name__}")
                )
                if time.monotonic() + delay >= deadline:
                    return _failed(
                        down,
                        f"no tool runner took the call within its deadline ({attempts} attempts): {down.message}",
                    )
                if attempts == 1:
                    log.warning(
                        "no tool runner serves project %s: call %s (%s) waits for one, same request id",
                        project_id,
                        meta.request_id,
                        name,
                    )
                await asyncio.sleep(delay)  # backoff between attempts, bounded by the deadline
                delay = min(delay * 2, RETRY_MAX_S)
            except JidoError as exc:
                return _failed(exc, exc.message)
            except ValueError as exc:  # a reply that is not a ToolResult
                return ToolResult(ok=False, error=ToolResultError(type="invalid_reply", message=str(exc)))

    async def cancel(self, project_id: str, request_id: str, conversation_id: str | None = None) -> None:
        try:
            await ToolsClient(self.bus, project_id).cancel(request_id, conversation_id=conversation_id)
        except JidoError as exc:
            log.info("cancel of tool call %s: %s", request_id, exc.message)


def turn_of(state: ConversationState | None) -> tuple[str | None, str | None]:
    """The open turn's id (the id of its first user message) and label (that message's text on
    one line, cut to :data:`TURN_LABEL_MAX`): what a tool call tells the tool runner, which
    records one checkpoint per turn. ``(None, None)`` outside a turn (pure)."""
    if state is None or not state.turn_messages:
        return None, None
    first = state.turn_messages[0]
    for entry in reversed(state.timeline):
        if entry.id == first and entry.type == UserMessage.TYPE:
            text = " ".join(entry.event_as(UserMessage).text.split())
            cut = text if len(text) <= TURN_LABEL_MAX else text[: TURN_LABEL_MAX - 1] + "…"
            return first, cut
    return first, None


def _failed(exc: JidoError, message: str) -> ToolResult:
    return ToolResult(ok=False, error=ToolResultError(type=exc.type, message=message, details=exc.details))


async def list_tool_specs(bus: Bus, project_id: str, *, timeout: float = 3.0) -> list[LlmToolSpec]:
    """The policy-filtered tools of the project, from the project service's ``list_tools``.

    Raises ``JidoError`` (``service_unavailable`` when nobody answers).
    """
    catalog = await ProjectClient(bus, project_id, timeout=timeout).list_tools()
    return [LlmToolSpec.model_validate(spec.model_dump()) for spec in catalog.tools]
