"""The prd service (seed 004 "PRD service"): ``serve(config, stop)`` (``jidocode serve prd``).

Endpoints (nats.micro ``jidocode-prd``, ``jido.prds.<p>.<verb>``, see ``shared.endpoints``)::

    create       CreatePrd   -> PrdView    write a new PRD's files
    list         ListPrds    -> PrdList    the project's PRDs and their loops
    get          GetPrd      -> PrdView    one PRD and its loop
    run          RunPrd      -> LoopInfo   start a loop (Conflict while one holds the PRD)
    pause        PausePrd    -> LoopInfo   cancel what is in flight, keep the story in progress
    resume       ResumePrd   -> LoopInfo   the same story again
    stop         StopPrd     -> LoopInfo
    reset_story  ResetStory  -> PrdView    the explicit user action (refused while the loop runs)
    finish       FinishPrd   -> PrdFinished  merge the branch, remove the worktree, push (:mod:`.finish`)

Besides the endpoints each replica runs the loops it owns (:mod:`.loop`), renews their leases
and scans for loops whose owner died (:meth:`LoopManager.recover`). A clean stop leaves every
loop's record ``running`` with its heartbeat cleared: the next start, or another replica,
resumes it at once. The project's root comes from the registry (``WatchedDirectory``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path

from jidocode.shared.bus import Bus
from jidocode.shared.config import Config
from jidocode.shared.egress import LazyProxy
from jidocode.shared.endpoints import endpoint
from jidocode.shared.envelope import Envelope
from jidocode.shared.errors import Conflict, InvalidInput, JidoError
from jidocode.shared.events.prd import (
    CreatePrd,
    FinishPrd,
    GetPrd,
    ListPrds,
    LoopInfo,
    PausePrd,
    PrdFinished,
    PrdList,
    PrdSummary,
    PrdView,
    ResetStory,
    ResumePrd,
    RunPrd,
    StopPrd,
)
from jidocode.shared.registry import WatchedDirectory
from jidocode.shared.service import ServiceHost, ServiceLifecycle

from . import files, ops
from .config import PrdConfig, config_warnings, load_config, load_config_report
from .egress import PushNetwork, login_opener, login_proxy
from .eventlog import ensure_stream
from .finish import finish_prd
from .loop import LoopManager, LoopSettings, ProviderResolver
from .loop_rules import HELD
from .model import Prd, UserStory, story_state
from .providers.base import Provider
from .store import LoopStore

__all__ = ["default_resolver", "serve"]

log = logging.getLogger("jidocode.prd")

#: Seconds ``finish`` waits for a loop whose record says it ended to be over on this replica.
SETTLE_S = 30.0


def default_resolver(bus: Bus, config: Config, egress: LazyProxy | None = None) -> ProviderResolver:
    """Providers from ``providers.registry`` (imported here, never by the loop); ``egress``: the
    proxy of the CLIs whose ``use_login`` is on (``None``: they get no network)."""
    from .providers.base import ProviderContext
    from .providers.registry import ProviderRegistry

    def resolve(key: str, project_id: str, prd_config: PrdConfig) -> Provider:
        registry = ProviderRegistry(prd_config.providers)
        context = ProviderContext(
            bus=bus,
            project_id=project_id,
            jido_home=str(config.jido_home),
            default_model=prd_config.model,
            egress=login_opener(egress, project_id, config),
        )
        provider: Provider = registry.resolve(key, context)
        return provider

    return resolve


def _view(project_id: str, root: Path, prd: Prd, loop: LoopInfo | None) -> PrdView:
    paths = files.PrdPaths(root, prd.name)
    return PrdView(
        project_id=project_id,
        name=prd.name,
        path=str(paths.dir),
        prd=prd.model_dump(mode="json", by_alias=True),
        loop=loop,
    )


def _new_prd(cmd: CreatePrd) -> Prd:
    stories: list[UserStory] = []
    for n, draft in enumerate(cmd.stories, start=1):
        stories.append(
            UserStory(
                id=draft.id or f"US-{n:03d}",
                title=draft.title,
                description=draft.description,
                acceptance_criteria=list(draft.acceptance_criteria),
                priority=draft.priority,
                passes=draft.passes,
                notes=draft.notes,
            )
        )
    try:
        return Prd(
            name=cmd.name,
            title=cmd.title,
            description=cmd.description,
            branch_name=cmd.branch_name,
            user_stories=stories,
        )
    except ValueError as exc:
        raise InvalidInput(f"PRD {cmd.name!r} is invalid: {exc}", details={"prd": cmd.name}) from None


async def serve(
    config: Config,
    stop: asyncio.Event,
    *,
    resolve_provider: ProviderResolver | None = None,
    settings: LoopSettings | None = None,
) -> None:
    async with ServiceLifecycle(config, "prd") as life:
        bus = life.bus
        directory = await WatchedDirectory.open(bus)
        life.on_close(directory.close)
        await ensure_stream(bus)
        store = await LoopStore.open(bus)
        logins = login_proxy(bus, config)  # started by the first CLI run with use_login
        life.on_close(logins.close)

        async def root_of(project_id: str) -> Path:
            return Path((await directory.get(project_id)).root_path)

        def config_of(root: Path) -> PrdConfig:
            return load_config(str(root), env=os.environ, jido_home=str(config.jido_home))

        def warnings_of(root: Path) -> list[str]:
            report = load_config_report(str(root), env=os.environ, jido_home=str(config.jido_home))
            return config_warnings(report)

        manager = LoopManager(
            bus,
            store,
            root_of=root_of,
            resolve_provider=resolve_provider or default_resolver(bus, config, logins),
            config_of=config_of,
            warnings_of=warnings_of,
            settings=settings or LoopSettings.from_env(),
        )
        life.on_close(manager.close)
        pushes = PushNetwork(logins, config.jido_home, os.environ)
        _serve_endpoints(
            life.host(description="JidoCode PRD loops (seed 004)"), store, manager, root_of, pushes
        )
        await life.run(stop, ready="prd service ready", on_ready=manager.start_recovery)


def _serve_endpoints(
    host: ServiceHost,
    store: LoopStore,
    manager: LoopManager,
    root_of: Callable[[str], Awaitable[Path]],
    pushes: PushNetwork | None = None,
) -> None:
    """Serve every PRD endpoint of ``shared.endpoints`` on ``host``."""

    async def loop_of(project_id: str, name: str) -> LoopInfo | None:
        stored = await store.get(project_id, name)
        return stored.record.info if stored is not None else None

    async def create(project_id: str, cmd: CreatePrd, env: Envelope) -> PrdView:
        root = await root_of(project_id)
        prd = _new_prd(cmd)
        await asyncio.to_thread(files.create_prd, files.PrdPaths(root, cmd.name), prd)
        await asyncio.to_thread(files.ensure_gitignored, root)  # runtime state stays out of git
        view = _view(project_id, root, prd, await loop_of(project_id, cmd.name))
        return view.model_copy(update={"warnings": await asyncio.to_thread(manager.warnings_of, root)})

    async def list_prds(project_id: str, cmd: ListPrds, env: Envelope) -> PrdList:
        root = await root_of(project_id)
        loops = {s.record.info.prd: s.record.info for s in await store.records(project_id)}
        return PrdList(prds=await asyncio.to_thread(_summaries, root, loops))

    async def get(project_id: str, cmd: GetPrd, env: Envelope) -> PrdView:
        root = await root_of(project_id)
        prd = await asyncio.to_thread(files.load_prd, files.PrdPaths(root, cmd.name).prd_json)
        return _view(project_id, root, prd, await loop_of(project_id, cmd.name))

    async def run(project_id: str, cmd: RunPrd, env: Envelope) -> LoopInfo:
        return await manager.run(project_id, cmd)

    async def pause(project_id: str, cmd: PausePrd, env: Envelope) -> LoopInfo:
        return await manager.pause(project_id, cmd.name)

    async def resume(project_id: str, cmd: ResumePrd, env: Envelope) -> LoopInfo:
        return await manager.resume(project_id, cmd.name)

    async def stop_(project_id: str, cmd: StopPrd, env: Envelope) -> LoopInfo:
        return await manager.stop(project_id, cmd.name, cmd.reason)

    async def reset_story(project_id: str, cmd: ResetStory, env: Envelope) -> PrdView:
        root = await root_of(project_id)
        loop = await loop_of(project_id, cmd.name)
        if manager.holds(project_id, cmd.name) or (loop is not None and loop.state == "running"):
            raise Conflict(
                f"the loop of PRD {cmd.name!r} is running: pause or stop it before resetting "
                f"story {cmd.story_id!r}",
                details={"prd": cmd.name, "story_id": cmd.story_id, "state": "running"},
            )
        paths = files.PrdPaths(root, cmd.name)
        prd = await asyncio.to_thread(files.load_prd, paths.prd_json)
        prd = ops.reset_story(prd, cmd.story_id)
        await asyncio.to_thread(files.save_prd, paths.prd_json, prd)
        return _view(project_id, root, prd, loop)

    host.serve_project(endpoint("prd", "create"), create)
    host.serve_project(endpoint("prd", "list"), list_prds)
    host.serve_project(endpoint("prd", "get"), get)
    host.serve_project(endpoint("prd", "run"), run)
    host.serve_project(endpoint("prd", "pause"), pause)
    host.serve_project(endpoint("prd", "resume"), resume)
    host.serve_project(endpoint("prd", "stop"), stop_)
    host.serve_project(endpoint("prd", "reset_story"), reset_story)
    host.serve_project(endpoint("prd", "finish"), _finisher(store, manager, root_of, pushes))


def _finisher(
    store: LoopStore,
    manager: LoopManager,
    root_of: Callable[[str], Awaitable[Path]],
    pushes: PushNetwork | None = None,
) -> Callable[[str, FinishPrd, Envelope], Awaitable[PrdFinished]]:
    """The ``finish`` endpoint: refused while this replica runs the PRD's loop (:mod:`.finish`)."""

    async def finish(project_id: str, cmd: FinishPrd, env: Envelope) -> PrdFinished:
        root = await root_of(project_id)
        prd = await asyncio.to_thread(files.load_prd, files.PrdPaths(root, cmd.name).prd_json)
        stored = await store.get(project_id, cmd.name)
        record = stored.record if stored is not None else None
        if record is not None and record.info.state not in HELD:
            await _ended(manager, project_id, cmd.name)
        others = [s.record.info for s in await store.records(project_id) if s.record.info.prd != cmd.name]
        config = manager.config_of(root)
        return await finish_prd(project_id, root, prd, cmd, record, config, others=others, network=pushes)

    return finish


async def _ended(manager: LoopManager, project_id: str, name: str) -> None:
    """Wait for this replica's loop of ``name``, whose record says it ended, to be over (its last
    event written, its files saved); ``Conflict`` when it does not end in time."""
    local = manager.loops.get((project_id, name))
    if local is None:
        return
    try:
        await asyncio.wait_for(asyncio.shield(local.settled.wait()), SETTLE_S)
    except TimeoutError:
        raise Conflict(
            f"the loop of PRD {name!r} is still ending here: finish again in a moment",
            details={"prd": name, "state": "running"},
        ) from None
    if local.task is not None:
        with contextlib.suppress(Exception):  # its outcome is the record's, already read
            await asyncio.wait_for(asyncio.shield(local.task), SETTLE_S)


def _summaries(root: Path, loops: Mapping[str, LoopInfo]) -> list[PrdSummary]:
    """One line per PRD under ``root`` with its loop's state (``ready`` without one); a PRD
    whose files do not load is listed with the problem."""
    out: list[PrdSummary] = []
    for name in files.list_prds(root):
        loop = loops.get(name)
        state = loop.state if loop is not None else "ready"
        try:
            prd = files.load_prd(files.PrdPaths(root, name).prd_json)
        except JidoError as exc:
            out.append(PrdSummary(name=name, state=state, problem=exc.message[:500]))
            continue
        states = [story_state(s) for s in prd.user_stories]
        current = next((s.id for s in prd.user_stories if s.in_progress), "")
        out.append(
            PrdSummary(
                name=name,
                title=prd.title,
                stories=len(states),
                passed=states.count("passed"),
                in_progress=current,
                state=state,
            )
        )
    return out
