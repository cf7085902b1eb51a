"""The conversation service: ``serve(config, stop)`` (``jidocode serve conversation``).

Endpoints (nats.micro ``jidocode-conversation``, ``jido.conversations.<p>.<verb>``):
``start``, ``stop``, ``delete``, ``prune``, ``list``, ``send_event``, ``get_projection``,
``replay``, ``rewind`` (see ``shared.endpoints``). With ``conversations.retention_days`` set, a periodic
sweep prunes every project (``prune.py``). Clients call them directly: ``start`` checks the project
in the registry and merges the project's ``llm`` settings under the request's. Each
replica runs the conversations it owns (see ``runtime.py``). The LLM port is
``make_llm_port(config)``; tests may pass their own ``llm``/``tools`` ports.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any

from jidocode.shared.bus import Bus
from jidocode.shared.config import Config
from jidocode.shared.endpoints import endpoint
from jidocode.shared.envelope import Envelope
from jidocode.shared.errors import PermissionDenied
from jidocode.shared.events.conversation import (
    ConversationDeleted,
    ConversationInfo,
    ConversationList,
    ConversationsPruned,
    DeleteConversation,
    EventAccepted,
    GetProjection,
    ListConversations,
    Projection,
    PruneConversations,
    ReplayInfo,
    RewindConversation,
    RewindResult,
    SendEvent,
    StartConversation,
    StopConversation,
    Subscribe,
)
from jidocode.shared.events.engine import ProjectInfo
from jidocode.shared.registry import WatchedDirectory
from jidocode.shared.service import ServiceHost, ServiceLifecycle
from jidocode.shared.settings import load_settings, require_usable
from jidocode.shared.telemetry import metrics
from jidocode.shared.telemetry.export import ensure_trace_stream

from .ports import LlmPort, ToolPort
from .prune import RetentionSweep, sweep_period_s
from .rewind import rewind_conversation
from .runtime import Runtime
from .settings import RuntimeSettings
from .tools_bridge import NatsToolPort

__all__ = ["project_llm_settings", "serve"]

log = logging.getLogger("jidocode.conversation")


#: Variables no client may have sent as a key, listed or not: the service's own bus identity.
_NEVER_SENT = ("NATS_", "JIDO_NATS")


def project_llm_settings(
    info: ProjectInfo, overrides: Mapping[str, Any] | None = None, *, jido_home: Path | None = None
) -> dict[str, Any]:
    """The project's effective ``llm`` settings (files + environment) under ``overrides``.

    Trust-aware (``load_settings`` reads the user's trust store): an untrusted
    project never picks the model, its endpoint or its key. ``None`` values are
    left out. The endpoint and its key travel as a pair: a request that sets
    ``api_base`` or ``api_key_env`` replaces both, so a key named by the files
    is never sent to a base the request chose (nor the other way round). A request
    may only name an ``api_key_env`` the user's settings list in
    ``llm.client_key_envs`` (``PermissionDenied`` otherwise): the service's
    environment holds its NATS password and provider keys, which a client must
    not be able to send to an endpoint of its choosing. While a settings file has an
    error, ``InvalidInput`` naming it (never the defaults in its place).
    """
    loaded = load_settings(Path(info.root_path), jido_home=jido_home, data_dir=info.data_dir)
    llm = require_usable(loaded, refused="a conversation in this project").llm  # decision 0304
    allowed_keys = llm.client_key_envs
    base = {k: v for k, v in llm.model_dump(mode="json").items() if v is not None and k != "client_key_envs"}
    over = dict(overrides or {})
    named = over.get("api_key_env")
    if named is not None and (named not in allowed_keys or str(named).startswith(_NEVER_SENT)):
        raise PermissionDenied(
            f"a client may not choose the API key variable {named!r}: the conversation service only "
            "sends a variable the user lists in llm.client_key_envs of ~/.jido_code/settings.json "
            '(e.g. "client_key_envs": ["MY_PROVIDER_KEY"]), and never its own NATS credentials; '
            "without one, --api-base alone sends no key",
            details={"api_key_env": named, "setting": "llm.client_key_envs"},
        )
    if over.keys() & {"api_base", "api_key_env"}:
        base.pop("api_base", None)
        base.pop("api_key_env", None)
    return {**base, **over}


async def serve(
    config: Config,
    stop: asyncio.Event,
    *,
    llm: LlmPort | None = None,
    tools: ToolPort | None = None,
    settings: RuntimeSettings | None = None,
    started: asyncio.Event | None = None,
    on_runtime: Callable[[Runtime], None] | None = None,
) -> None:
    """Serve until ``stop`` is set. ``on_runtime`` is handed the runtime once it runs (tests
    and benchmarks look at what it has loaded)."""
    settings = settings or RuntimeSettings.from_env()
    if llm is None:  # litellm's seconds of import overlap the connection and the streams' set-up
        from .llm.adapter import preload_litellm

        preload_litellm()
    async with ServiceLifecycle(config, "conversation") as life:
        bus = life.bus
        metadata: dict[str, str] = {}
        if llm is None:
            llm = await _default_llm(config, bus, metadata)
        runtime = Runtime(
            bus, llm=llm, tools=tools or NatsToolPort(bus, timeout=settings.tool_timeout_s), settings=settings
        )
        await runtime.start()
        life.on_close(runtime.close)
        metrics.CONVERSATIONS_OWNED.labels(bus.source).set_function(lambda: len(runtime.owned))
        if bus.tracer is not None:  # the spans stream that `jidocode trace` reads
            await ensure_trace_stream(bus)
        if on_runtime is not None:
            on_runtime(runtime)
        sweep = RetentionSweep(bus, _pruner(runtime), jido_home=config.jido_home, period_s=sweep_period_s())
        sweep.start()
        life.on_close(sweep.close)
        directory = await WatchedDirectory.open(bus)
        life.on_close(directory.close)
        host = life.host(
            description="JidoCode conversations: reducer, journal, projections", metadata=metadata
        )
        _serve_endpoints(host, runtime, directory, config)
        ready = None if started is None else started.set
        await life.run(stop, ready=f"conversation service ready ({bus.source})", on_ready=ready)


async def _default_llm(config: Config, bus: Bus, metadata: dict[str, str]) -> LlmPort:
    """The LLM port of the environment's model picker; the picked model goes into ``metadata``."""
    from .llm import ModelPicker, make_llm_port

    picker = ModelPicker(os.environ)
    llm = make_llm_port(config, bus=bus, picker=picker)
    await picker.pick()
    # The model a conversation gets when it configures none (`jidocode models` reads it).
    metadata.update(picker.metadata())
    log.info("model when none is configured: %s", picker.describe())
    # litellm's import (seconds of CPU) goes on in its thread (``serve`` started it): conversations
    # are taken meanwhile, and a model call awaits it off the event loop, as every litellm lookup
    # does (a restarted service takes its busy conversations back 2 s sooner: issue 31, point 4).
    return llm


def _pruner(runtime: Runtime) -> Callable[[str, float], Awaitable[ConversationsPruned]]:
    """The retention sweep's prune of one project (decision 0325)."""

    async def prune(project_id: str, days: float) -> ConversationsPruned:
        return await runtime.endpoints.prune_conversations(
            project_id, PruneConversations(older_than_days=days)
        )

    return prune


def _serve_endpoints(
    host: ServiceHost, runtime: Runtime, directory: WatchedDirectory, config: Config
) -> None:
    """Serve every conversation endpoint of ``shared.endpoints`` on ``host``."""

    async def start(project_id: str, cmd: StartConversation, env: Envelope) -> ConversationInfo:
        info = await directory.get(project_id)  # NotFound: the engine has no such project
        try:
            llm_settings = await asyncio.to_thread(
                project_llm_settings, info, cmd.settings, jido_home=config.jido_home
            )
        except OSError:
            llm_settings = dict(cmd.settings)
        cmd = cmd.model_copy(update={"settings": llm_settings})
        return ConversationInfo.model_validate(await runtime.start_conversation(project_id, cmd))

    async def stop_(project_id: str, cmd: StopConversation, env: Envelope) -> ConversationInfo:
        return ConversationInfo.model_validate(await runtime.stop_conversation(project_id, cmd))

    async def list_(project_id: str, cmd: ListConversations, env: Envelope) -> ConversationList:
        return await runtime.list_conversations(project_id, cmd)

    async def delete(project_id: str, cmd: DeleteConversation, env: Envelope) -> ConversationDeleted:
        return await runtime.delete_conversation(project_id, cmd)

    async def prune(project_id: str, cmd: PruneConversations, env: Envelope) -> ConversationsPruned:
        return await runtime.endpoints.prune_conversations(project_id, cmd)

    async def send_event(project_id: str, cmd: SendEvent, env: Envelope) -> EventAccepted:
        await directory.get(project_id)  # Conflict: the project is stopped (no new input then)
        return EventAccepted.model_validate(await runtime.send_event(project_id, cmd, env))

    async def get_projection(project_id: str, cmd: GetProjection, env: Envelope) -> Projection:
        value = await runtime.get_projection(project_id, cmd)
        return Projection(conversation_id=cmd.conversation_id, name=cmd.name, value=value)

    async def replay(project_id: str, cmd: Subscribe, env: Envelope) -> ReplayInfo:
        return await runtime.replay_info(project_id, cmd)

    host.serve_project(endpoint("conversation", "start"), start)
    host.serve_project(endpoint("conversation", "stop"), stop_)
    host.serve_project(endpoint("conversation", "delete"), delete)
    host.serve_project(endpoint("conversation", "prune"), prune)
    host.serve_project(endpoint("conversation", "list"), list_)
    host.serve_project(endpoint("conversation", "send_event"), send_event)
    host.serve_project(endpoint("conversation", "get_projection"), get_projection)
    host.serve_project(endpoint("conversation", "replay"), replay)

    async def rewind(project_id: str, cmd: RewindConversation, env: Envelope) -> RewindResult:
        return await rewind_conversation(runtime.endpoints, project_id, cmd)

    host.serve_project(endpoint("conversation", "rewind"), rewind)
