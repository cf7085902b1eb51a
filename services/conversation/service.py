"""The conversation service: ``serve(config, stop)`` (``jidocode serve conversation``).

Endpoints (nats.micro ``jidocode-conversation``, ``jido.conversations.<p>.<verb>``):
``start``, ``stop``, ``send_event``, ``get_projection``, ``replay``. Each
replica runs the conversations it owns (see ``runtime.py``). The LLM port is
``make_llm_port(config)``; tests may pass their own ``llm``/``tools`` ports.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from jidocode.shared import subjects
from jidocode.shared.bus import Bus
from jidocode.shared.config import Config
from jidocode.shared.envelope import Envelope
from jidocode.shared.events.conversation import (
    GetProjection,
    SendEvent,
    StartConversation,
    StopConversation,
    Subscribe,
)
from jidocode.shared.service import ServiceHost, expect, scoped_project_id

from .ports import LlmPort, ToolPort
from .runtime import Runtime
from .settings import RuntimeSettings
from .tools_bridge import NatsToolPort

__all__ = ["serve"]

log = logging.getLogger("jidocode.conversation")


async def serve(
    config: Config,
    stop: asyncio.Event,
    *,
    llm: LlmPort | None = None,
    tools: ToolPort | None = None,
    settings: RuntimeSettings | None = None,
    started: asyncio.Event | None = None,
) -> None:
    settings = settings or RuntimeSettings.from_env()
    bus = await Bus.connect(config, "conversation")
    try:
        if llm is None:
            from .llm import make_llm_port
            from .llm.adapter import load_litellm_async

            llm = make_llm_port(config, bus=bus)
            # litellm's import takes seconds of CPU: finish it before taking any
            # lease, so heartbeats are never starved by the first model call.
            await load_litellm_async()
        runtime = Runtime(
            bus, llm=llm, tools=tools or NatsToolPort(bus, timeout=settings.tool_timeout_s), settings=settings
        )
        await runtime.start()
        host = ServiceHost(
            bus,
            name="conversation",
            description="JidoCode conversations: reducer, journal, projections",
            max_request_bytes=settings.max_message_bytes + 64 * 1024,
        )

        async def start(env: Envelope) -> Any:
            return await runtime.start_conversation(scoped_project_id(env), expect(env, StartConversation))

        async def stop_(env: Envelope) -> Any:
            return await runtime.stop_conversation(scoped_project_id(env), expect(env, StopConversation))

        async def send_event(env: Envelope) -> Any:
            return await runtime.send_event(scoped_project_id(env), expect(env, SendEvent), env)

        async def get_projection(env: Envelope) -> Any:
            return await runtime.get_projection(scoped_project_id(env), expect(env, GetProjection))

        async def replay(env: Envelope) -> Any:
            return await runtime.replay_info(scoped_project_id(env), expect(env, Subscribe))

        for verb, handler in (
            ("start", start),
            ("stop", stop_),
            ("send_event", send_event),
            ("get_projection", get_projection),
            ("replay", replay),
        ):
            host.add_endpoint(verb, subject=subjects.conversations_pattern(verb), handler=handler)
        await host.start()
        log.info("conversation service ready (%s)", bus.source)
        if started is not None:
            started.set()
        try:
            await stop.wait()
        finally:
            await host.stop()
            await runtime.close()
    finally:
        await bus.close()
