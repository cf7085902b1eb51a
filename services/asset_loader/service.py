"""The asset-loader service: load, serve, watch and run a project's assets.

Endpoints (nats.micro ``jidocode-asset-loader``, subjects ``jido.assets.<p>.<verb>``)::

    get                          GetAsset        -> AssetDocument
    list / search                ListAssets / SearchAssets -> AssetItems
    reload                       ReloadAssets    -> AssetReport (generation, counts, diagnostics)
    diagnostics                  GetDiagnostics  -> AssetReport (+ settings files)
    graph                        GraphQuery      -> GraphResult (depends on op)
    tools                        tools.ListTools -> tools.ToolCatalog
    call_tool                    tools.RunTool   -> tools.ToolResult

A project is loaded when ``project.started`` is seen on ``jido.sig.*`` and
lazily on its first request; its root comes from the engine's registry, read
through the shared :class:`~jidocode.shared.registry.ProjectDirectory`. Each load builds a complete :class:`Generation` off the
event loop and swaps it in atomically, then publishes
``skill/registry/updated``, ``project.assets_loaded`` (seed 000 §6: counts,
diagnostics count, trigger, duration) and ``project.assets_reloaded`` (the same
generation with its diagnostics). A watchfiles watcher per project publishes
``assets.changed`` (the changed files, at most ``MAX_CHANGES_PER_SIGNAL``) and
reloads after debounced changes (it also watches the project root, without
recursion, for ``JIDO.md``/``AGENTS.md``/``CLAUDE.md`` and for a layer folder
such as ``.claude/`` appearing, which it then watches too); ``project.stopped``
stops it.

Routed skill signals: a CloudEvent published on ``jido.assets.<p>.signal``
(queue group, one replica takes it) whose type is a skill route runs that
route through the tool runner's ``invoke_skill`` and publishes
``skill.route.completed``/``skill.route.failed`` (:mod:`.skill_signals`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import nats.errors

from jidocode.services.asset_loader.generation import Generation, load_generation
from jidocode.services.asset_loader.hooks import HookSignal
from jidocode.services.asset_loader.layout import Layer, ensure_layout, layers
from jidocode.services.asset_loader.runtime import AssetRuntime, error_result
from jidocode.services.asset_loader.skill_signals import SIGNAL_VERB, SkillSignals
from jidocode.services.asset_loader.store import AssetStore, get_asset, list_assets, search_assets
from jidocode.services.asset_loader.tools import call_asset_tool, graph_query, tool_specs
from jidocode.services.asset_loader.watcher import DEFAULT_DEBOUNCE_MS, asset_changes, watch_layers
from jidocode.shared import subjects
from jidocode.shared.bus import Bus
from jidocode.shared.clients import ToolsClient
from jidocode.shared.config import Config
from jidocode.shared.endpoints import endpoint
from jidocode.shared.envelope import Envelope, new_id, now_iso
from jidocode.shared.errors import JidoError
from jidocode.shared.events import EventModel
from jidocode.shared.events.assets import (
    MAX_CHANGES_PER_SIGNAL,
    AssetDocument,
    AssetItems,
    AssetReport,
    AssetsChanged,
    AssetsLoaded,
    AssetsReloaded,
    GetAsset,
    GetDiagnostics,
    GraphQuery,
    GraphResult,
    ListAssets,
    ReloadAssets,
    SearchAssets,
    SkillRegistryUpdated,
    SkillRouteCompleted,
    SkillRouteFailed,
)
from jidocode.shared.events.engine import ProjectInfo, ProjectStarted, ProjectStopped
from jidocode.shared.events.tools import (
    ListTools,
    RunTool,
    ToolCallMeta,
    ToolCancelRequested,
    ToolCatalog,
    ToolResult,
    ToolSpec,
)
from jidocode.shared.registry import ProjectDirectory
from jidocode.shared.service import ServiceHost, ServiceLifecycle, scoped_project_id
from jidocode.shared.telemetry import metrics

__all__ = ["AssetService", "serve"]

log = logging.getLogger("jidocode.asset_loader")

#: Diagnostics carried by one reload signal (all of them stay readable via ``diagnostics``).
MAX_SIGNAL_DIAGNOSTICS: Final = 100
#: How long a project load waits for its watcher to be armed.
WATCH_READY_TIMEOUT_S: Final = 5.0
#: Requests handled at the same time by one replica.
MAX_INFLIGHT: Final = 256
#: The queue group of routed skill signals (each is handled by one replica).
SIGNAL_QUEUE: Final = "jidocode-asset-loader-signals"


@dataclass
class ProjectAssets:
    info: ProjectInfo
    store: AssetStore = field(default_factory=AssetStore)
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    #: Stops the current watcher (a new one gets a new event).
    watch_stop: asyncio.Event = field(default_factory=asyncio.Event)
    #: The layer folders the current watcher watches.
    watched: tuple[str, ...] = ()
    watcher: asyncio.Task[None] | None = None
    #: Held while the watcher is replaced (a request and a file change may both ask for it).
    rewatch_lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    runtime: AssetRuntime | None = None


class _BusPorts:
    """The runtime's ports over the bus: tool runner requests and signal publishing."""

    def __init__(self, bus: Bus, project: ProjectAssets) -> None:
        self.bus = bus
        self.project = project

    async def run(self, name: str, args: dict[str, Any], meta: ToolCallMeta) -> ToolResult:
        pid = self.project.info.project_id
        tools = self.project.store.current.settings.tools
        timeout = tools.timeout_s + tools.approval_timeout_s + 5.0
        try:
            return await ToolsClient(self.bus, pid).run(
                name,
                args,
                meta=meta,
                timeout=timeout,
                conversation_id=meta.conversation_id,
                correlation_id=meta.correlation_id,
            )
        except JidoError as exc:
            return error_result(exc)

    async def signal(self, event: EventModel) -> None:
        await self.bus.emit(event, project_id=self.project.info.project_id)

    async def hook(self, hook: HookSignal) -> None:
        try:
            subject = subjects.hook(hook.signal_type)
        except ValueError as exc:
            log.warning("hook signal type %r cannot be published: %s", hook.signal_type, exc)
            return
        env = Envelope(
            id=new_id(),
            source=hook.source,
            type=hook.signal_type,
            data=hook.data,
            time=now_iso(),
            extensions={"projectid": self.project.info.project_id},
        )
        await self.bus.publish_envelope(subject, env)


class AssetService:
    """Handlers of the asset loader over a bus; one :class:`ProjectAssets` per loaded project."""

    def __init__(
        self,
        bus: Bus,
        config: Config,
        directory: ProjectDirectory,
        *,
        debounce_ms: int = DEFAULT_DEBOUNCE_MS,
    ) -> None:
        self.bus = bus
        self.config = config
        #: The project registry (read only): where a project's root and data dir come from.
        self.directory = directory
        self.debounce_ms = debounce_ms
        self.projects: dict[str, ProjectAssets] = {}
        self._loading: dict[str, asyncio.Task[ProjectAssets]] = {}
        self._tasks: set[asyncio.Task[Any]] = set()
        #: Skill routes dispatched by signals on ``jido.assets.<p>.signal``.
        self.skill_signals = SkillSignals(self._generation_of, self._run_tool, self._publish_outcome)

    # -- projects --------------------------------------------------------------------------

    async def project(self, project_id: str, info: ProjectInfo | None = None) -> ProjectAssets:
        """The loaded project (loading it, once, if needed)."""
        loaded = self.projects.get(project_id)
        if loaded is not None:
            return loaded
        task = self._loading.get(project_id)
        if task is None:
            task = asyncio.create_task(self._load_project(project_id, info))
            self._loading[project_id] = task
            task.add_done_callback(lambda _t: self._loading.pop(project_id, None))
        return await asyncio.shield(task)

    async def _load_project(self, project_id: str, info: ProjectInfo | None) -> ProjectAssets:
        info = info or await self.directory.get(project_id)
        root = Path(info.root_path)
        with contextlib.suppress(OSError, JidoError):
            await asyncio.to_thread(ensure_layout, root, info.data_dir)
        pa = ProjectAssets(info=info)
        pa.runtime = AssetRuntime(
            project_id, info.root_path, _BusPorts(self.bus, pa), _BusPorts(self.bus, pa)
        )
        await self.reload(pa, trigger="load")
        await self._start_watcher(pa)
        self.projects[project_id] = pa
        log.info("assets of project %s loaded from %s", project_id, info.root_path)
        return pa

    def _layers(self, pa: ProjectAssets) -> list[Layer]:
        return list(
            layers(Path(pa.info.root_path), data_dir=pa.info.data_dir, jido_home=self.config.jido_home)
        )

    def _existing(self, pa: ProjectAssets) -> tuple[str, ...]:
        return tuple(str(layer.path) for layer in self._layers(pa) if layer.path.is_dir())

    async def _start_watcher(self, pa: ProjectAssets) -> None:
        """Watch the layer folders that exist now; return once the watcher is armed."""

        async def on_change(changes: set[Any]) -> None:
            await self._changed(pa, changes)
            await self.reload(pa, trigger="watch")
            if await asyncio.to_thread(self._existing, pa) != pa.watched:  # a new .claude/, say
                self._spawn(self._watch_new_layers(pa))

        pa.watch_stop = asyncio.Event()
        pa.watched = self._existing(pa)
        ready = asyncio.Event()
        pa.watcher = asyncio.create_task(
            watch_layers(
                self._layers(pa), on_change, pa.watch_stop, debounce_ms=self.debounce_ms, ready=ready
            ),
            name=f"assets-watch-{pa.info.project_id}",
        )
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(ready.wait(), WATCH_READY_TIMEOUT_S)

    async def _changed(self, pa: ProjectAssets, changes: set[Any]) -> None:
        """Publish ``assets.changed`` for a burst the watcher saw (a lost signal only logs)."""
        found = asset_changes(changes, self._layers(pa))
        if not found:
            return
        pid = pa.info.project_id
        event = AssetsChanged(
            project_id=pid,
            changes=found[:MAX_CHANGES_PER_SIGNAL],
            count=len(found),
            kinds=sorted({c.kind for c in found}),
        )
        try:
            await self.bus.emit(event, project_id=pid)
        except (nats.errors.Error, JidoError):  # the reload that follows matters more
            log.warning("could not publish assets.changed of project %s", pid, exc_info=True)

    async def _stop_watcher(self, pa: ProjectAssets) -> None:
        pa.watch_stop.set()
        if pa.watcher is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await pa.watcher
            pa.watcher = None

    async def _rewatch_if_layers_changed(self, pa: ProjectAssets) -> bool:
        """A layer folder created (or removed) since the watcher started: watch the new set
        (not for a project forgotten meanwhile). Whether the watcher was replaced."""
        async with pa.rewatch_lock:
            if self.projects.get(pa.info.project_id) is not pa and pa.watcher is None:
                return False
            if await asyncio.to_thread(self._existing, pa) == pa.watched:
                return False
            await self._stop_watcher(pa)
            await self._start_watcher(pa)
            return True

    async def _watch_new_layers(self, pa: ProjectAssets) -> None:
        """The watcher saw a layer folder come or go: watch the new set, then reload (trigger
        ``layers``), so what was written there before the new watcher was armed is read too."""
        try:
            if await self._rewatch_if_layers_changed(pa):
                await self.reload(pa, trigger="layers")
        except (OSError, nats.errors.Error, JidoError):
            log.warning("could not watch the new layer folders of %s", pa.info.project_id, exc_info=True)

    async def reload(self, pa: ProjectAssets, *, trigger: str) -> Generation:
        """Build a new generation off the loop, swap it in, publish the signals."""
        async with pa.lock:
            number = pa.store.current.number + 1
            started = time.monotonic()
            gen = await asyncio.to_thread(
                load_generation,
                Path(pa.info.root_path),
                data_dir=pa.info.data_dir,
                jido_home=self.config.jido_home,
                number=number,
            )
            pa.store.swap(gen)
            took_ms = (time.monotonic() - started) * 1000
            log.info(
                "project %s generation %d (%s): %s, %d diagnostics in %.0f ms",
                pa.info.project_id,
                number,
                trigger,
                gen.counts,
                len(gen.diagnostics),
                took_ms,
            )
        pid = pa.info.project_id
        await self.bus.emit(
            SkillRegistryUpdated(project_id=pid, skills=list(gen.skills), count=len(gen.skills)),
            project_id=pid,
        )
        await self.bus.emit(
            AssetsLoaded(
                project_id=pid,
                generation=gen.number,
                counts=gen.counts,
                diagnostics=len(gen.diagnostics),
                trigger=trigger,
                duration_ms=took_ms,
            ),
            project_id=pid,
        )
        await self.bus.emit(
            AssetsReloaded(
                project_id=pid,
                generation=gen.number,
                counts=gen.counts,
                diagnostics=[d.model_dump(mode="json") for d in gen.diagnostics[:MAX_SIGNAL_DIAGNOSTICS]],
                trigger=trigger,
            ),
            project_id=pid,
        )
        metrics.ASSET_RELOADS.labels(str(trigger)).inc()
        return gen

    async def forget(self, project_id: str) -> None:
        pa = self.projects.pop(project_id, None)
        if pa is None:
            return
        async with pa.rewatch_lock:
            await self._stop_watcher(pa)

    async def close(self) -> None:
        await self.skill_signals.close()
        for pid in list(self.projects):
            await self.forget(pid)
        for task in list(self._tasks):
            task.cancel()

    def _spawn(self, coro: Awaitable[Any]) -> None:
        task: asyncio.Task[Any] = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # -- signals ---------------------------------------------------------------------------

    async def on_signal(self, env: Envelope) -> None:
        if env.type == ProjectStarted.TYPE:
            data = env.data or {}
            pid = data.get("project_id")
            if isinstance(pid, str) and pid not in self.projects:
                self._spawn(self._load_quietly(pid))
        elif env.type == ProjectStopped.TYPE:
            pid = (env.data or {}).get("project_id")
            if isinstance(pid, str):
                self._spawn(self.forget(pid))
        elif env.type == ToolCancelRequested.TYPE:  # the call's workflows stop before their next step
            data = env.data or {}
            loaded = self.projects.get(str(data.get("project_id")))
            request_id = data.get("request_id")
            if loaded is not None and loaded.runtime is not None and isinstance(request_id, str):
                loaded.runtime.stop(request_id)

    async def on_skill_signal(self, env: Envelope) -> None:
        """A signal on ``jido.assets.<p>.signal``: run the skill route its type names (in the
        background; this waits only while every dispatch slot is taken)."""
        try:
            pid = scoped_project_id(env)
        except JidoError as exc:
            log.warning("routed signal %s refused: %s", env.id, exc.message)
            return
        await self.skill_signals.submit(pid, env)

    async def _generation_of(self, project_id: str) -> Generation:
        return (await self.project(project_id)).store.current

    async def _run_tool(
        self, project_id: str, name: str, args: dict[str, Any], meta: ToolCallMeta
    ) -> ToolResult:
        pa = await self.project(project_id)
        return await _BusPorts(self.bus, pa).run(name, args, meta)

    async def _publish_outcome(
        self, project_id: str, event: SkillRouteCompleted | SkillRouteFailed, cause: Envelope
    ) -> None:
        await self.bus.emit(
            event,
            project_id=project_id,
            causation_id=cause.id,
            correlation_id=cause.correlation_id or cause.id,
            conversation_id=cause.conversation_id,
        )

    async def _load_quietly(self, project_id: str) -> None:
        try:
            await self.project(project_id)
        except JidoError as exc:
            log.warning("could not load the assets of project %s: %s", project_id, exc.message)

    # -- endpoints -------------------------------------------------------------------------

    async def _gen(self, project_id: str) -> tuple[ProjectAssets, Generation]:
        pa = await self.project(project_id)
        return pa, pa.store.current

    async def get_endpoint(self, pid: str, req: GetAsset, env: Envelope) -> AssetDocument:
        _, gen = await self._gen(pid)
        return AssetDocument(asset=dict(get_asset(gen, req.kind, req.name)))

    async def list_endpoint(self, pid: str, req: ListAssets, env: Envelope) -> AssetItems:
        _, gen = await self._gen(pid)
        return AssetItems(items=list(list_assets(gen, req.kind)))

    async def search_endpoint(self, pid: str, req: SearchAssets, env: Envelope) -> AssetItems:
        _, gen = await self._gen(pid)
        return AssetItems(items=list(search_assets(gen, req.query, req.kind, req.limit)))

    async def reload_endpoint(self, pid: str, req: ReloadAssets, env: Envelope) -> AssetReport:
        fresh = pid not in self.projects
        pa = await self.project(pid)
        if fresh:
            return _report(pa.store.current)
        gen = await self.reload(pa, trigger="request")
        await self._rewatch_if_layers_changed(pa)
        return _report(gen)

    async def diagnostics(self, pid: str, req: GetDiagnostics, env: Envelope) -> AssetReport:
        _, gen = await self._gen(pid)
        return _report(gen).model_copy(update={"settings_files": list(gen.settings_files)})

    async def graph(self, pid: str, req: GraphQuery, env: Envelope) -> GraphResult:
        _, gen = await self._gen(pid)
        result = graph_query(gen, req.op, req.model_dump(exclude={"type", "op"}, exclude_none=True))
        return GraphResult(op=req.op, result=result)

    async def tools(self, pid: str, req: ListTools, env: Envelope) -> ToolCatalog:
        _, gen = await self._gen(pid)
        return ToolCatalog(tools=[ToolSpec.model_validate(s) for s in tool_specs(gen)])

    async def call_tool(self, pid: str, call: RunTool, env: Envelope) -> ToolResult:
        pa, gen = await self._gen(pid)
        assert pa.runtime is not None
        return await call_asset_tool(gen, pa.runtime, call)

    def serve_on(self, host: ServiceHost) -> None:
        """Serve every asset-loader endpoint of ``shared.endpoints`` on ``host``."""
        host.serve_project(endpoint("asset_loader", "get"), self.get_endpoint)
        host.serve_project(endpoint("asset_loader", "list"), self.list_endpoint)
        host.serve_project(endpoint("asset_loader", "search"), self.search_endpoint)
        host.serve_project(endpoint("asset_loader", "reload"), self.reload_endpoint)
        host.serve_project(endpoint("asset_loader", "diagnostics"), self.diagnostics)
        host.serve_project(endpoint("asset_loader", "graph"), self.graph)
        host.serve_project(endpoint("asset_loader", "tools"), self.tools)
        host.serve_project(endpoint("asset_loader", "call_tool"), self.call_tool)


def _report(gen: Generation) -> AssetReport:
    return AssetReport(
        generation=gen.number,
        loaded_at=gen.loaded_at,
        root=gen.root,
        counts=gen.counts,
        diagnostics=[d.model_dump(mode="json") for d in gen.diagnostics],
    )


async def serve(config: Config, stop: asyncio.Event) -> None:
    async with ServiceLifecycle(config, "asset_loader") as life:
        bus = life.bus
        service = AssetService(bus, config, await ProjectDirectory.open(bus))
        life.on_close(service.close)
        # Concurrent requests matter here: a workflow step that is itself an asset
        # tool comes back to call_tool through the tool runner while the outer call runs.
        host = life.host(
            max_concurrent=MAX_INFLIGHT,
            description="JidoCode asset loader: skills, commands, workflows, skill graph",
        )
        service.serve_on(host)
        await bus.subscribe(subjects.signal(ProjectStarted.TYPE), service.on_signal)
        await bus.subscribe(subjects.signal(ProjectStopped.TYPE), service.on_signal)
        await bus.subscribe(subjects.signal(ToolCancelRequested.TYPE), service.on_signal)
        # Routed skill signals: one replica takes each.
        await bus.subscribe(subjects.assets_pattern(SIGNAL_VERB), service.on_skill_signal, queue=SIGNAL_QUEUE)
        await life.run(stop, ready="asset loader ready")
