"""The project service's conversation front door (seed 000 ``Project.Server`` conversation API).

Endpoints ``jido.project.<p>.<verb>``:

=====================  ===========================================================
``start_conversation`` start (or reopen) a conversation; the project's ``llm``
                       settings (settings.json + environment) become its
                       settings, overridden by the request's own
``stop_conversation``  stop it (its journal stays; start reopens it)
``send_event``         validate one external event and publish it to the
                       conversation's input stream; returns the event id
``get_projection``     a projection (``timeline``, ``llm_context``, ``diagnostics``,
                       ``subagent_status``, ``pending_tool_calls``, ``usage``,
                       ``canonical_timeline``, ``canonical_llm_context``)
``subscribe``          the subject to follow and where to replay from
=====================  ===========================================================

The project must be known to the engine (``directory.get`` raises
``NotFound``); everything else is forwarded to the conversation service
(``jido.conversations.<p>.<verb>``), whose errors come back unchanged.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any, Protocol

from jidocode.shared import subjects
from jidocode.shared.bus import Bus
from jidocode.shared.envelope import Envelope
from jidocode.shared.events import EventModel
from jidocode.shared.events.conversation import (
    GetProjection,
    SendEvent,
    StartConversation,
    StopConversation,
    Subscribe,
)
from jidocode.shared.events.engine import ProjectInfo
from jidocode.shared.service import ServiceHost, expect, scoped_project_id

__all__ = ["FORWARD_TIMEOUT", "register"]

#: Seconds to wait for the conversation service (a projection may rebuild from the journal).
FORWARD_TIMEOUT = 10.0


class _Directory(Protocol):
    async def get(self, project_id: str) -> ProjectInfo: ...


def _project_llm_settings(info: ProjectInfo) -> dict[str, Any]:
    """The project's effective ``llm`` settings (files + environment), ``None`` values left out."""
    from jidocode.shared.settings import load_settings

    loaded = load_settings(Path(info.root_path), data_dir=info.data_dir)
    return {k: v for k, v in loaded.settings.llm.model_dump(mode="json").items() if v is not None}


def register(host: ServiceHost, bus: Bus, directory: _Directory) -> None:
    """Add the conversation endpoints of the project service to ``host``."""

    async def _forward(env: Envelope, verb: str, body: EventModel) -> Any:
        project_id = scoped_project_id(env)
        await directory.get(project_id)
        return await bus.request(
            subjects.conversations(project_id, verb),
            body,
            timeout=FORWARD_TIMEOUT,
            project_id=project_id,
            correlation_id=env.correlation_id or env.id,
            causation_id=env.id,
        )

    async def start_conversation(env: Envelope) -> Any:
        cmd = expect(env, StartConversation)
        project_id = scoped_project_id(env)
        info = await directory.get(project_id)
        try:
            base = await asyncio.to_thread(_project_llm_settings, info)
        except OSError:
            base = {}
        body = cmd.model_copy(update={"settings": {**base, **cmd.settings}})
        return await bus.request(
            subjects.conversations(project_id, "start"),
            body,
            timeout=FORWARD_TIMEOUT,
            project_id=project_id,
            correlation_id=env.correlation_id or env.id,
            causation_id=env.id,
        )

    async def stop_conversation(env: Envelope) -> Any:
        return await _forward(env, "stop", expect(env, StopConversation))

    async def send_event(env: Envelope) -> Any:
        return await _forward(env, "send_event", expect(env, SendEvent))

    async def get_projection(env: Envelope) -> Any:
        return await _forward(env, "get_projection", expect(env, GetProjection))

    async def subscribe(env: Envelope) -> Any:
        return await _forward(env, "replay", expect(env, Subscribe))

    for verb, handler in (
        ("start_conversation", start_conversation),
        ("stop_conversation", stop_conversation),
        ("send_event", send_event),
        ("get_projection", get_projection),
        ("subscribe", subscribe),
    ):
        host.add_endpoint(verb, subject=subjects.project_pattern(verb), handler=handler)
