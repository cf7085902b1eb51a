"""The loop manager (seed 004 "Loop manager"): a PRD worked story by story, the seed's nine steps.

For each story until none is left: 1 load the PRD, 2 select the story (``next_story``: the
one in progress first, sticky), 3 mark it in progress and save, 4 build the prompt, 5 run the
provider's iteration (each normalized event becomes ``prd.<kind>``), 6 run the quality checks
(output streamed as ``prd.command_output`` with ``source="check"``, then ``prd.quality.report``),
7 commit when they pass (``prd.git.committed``; nothing changed: no commit, noted), 8 mark the
story passed and save (``prd.story.state_changed``), 9 append to ``progress.md`` and ``agent.log``.

Rules kept here, not in the steps:

- **never passed on a failed check**: step 8 is reached only from a report whose every check is ok;
- **retries**: a transient provider failure or a failed check is tried again per the
  :class:`RetryPolicy` (``prd.retry.scheduled`` with the delay; the wait is interruptible); out of
  retries the loop ends in ``error`` with the reason and the story stays in progress (sticky);
- **persist around transitions**: ``prd.json`` and the loop record are written before the event
  announcing a transition is emitted, and before the next step starts;
- **pause and stop act within one step**: they cancel what is in flight (the provider's
  iteration, the checks, a retry's wait) at once; the story stays in progress; the new state is
  persisted and announced; resume runs the same story again (the same attempt number);
- **one loop per PRD** (the record's CAS claim, :mod:`.store`) and **parallel PRDs only in
  separate worktrees** (a second running PRD on the same work dir is ``Conflict``).

The provider comes from a resolver callable (``(key, project_id, config) -> Provider``): the
service resolves through ``providers.registry``; tests and the benchmark inject their own. This
module imports the provider *contract* only.

Rooms: this module is the manager (claim, start, pause/stop/resume, recovery, shutdown);
:mod:`.loop_run` runs one loop's steps (the effects: record, files, events, provider, checks,
git); :mod:`.loop_rules` holds the decisions as pure functions (outcomes, retries, relayed
events, record writes, refusals); :mod:`.loop_prepare` the work dir and branch of a new loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Final

from jidocode.shared.bus import Bus
from jidocode.shared.errors import Conflict, JidoError, NotFound
from jidocode.shared.events.prd import LoopInfo, LoopState, PrdLoopStateChanged, RunPrd
from jidocode.shared.lease import BUS_ERRORS, Held, KeptLease, Seen, Sightings

from . import files
from .config import PrdConfig, config_warnings, load_config, load_config_report
from .eventlog import EventLog
from .loop_prepare import prepare
from .loop_rules import MAX_EVENT_TEXT, LoopSettings, halt_plan, lease_lapsed, resume_refusal, run_refusal
from .loop_run import RunningLoop
from .providers.base import Abandons, Provider
from .store import LoopRecord, LoopStore, RunOptions, StaleRecord, Stored, lease_key

__all__ = ["MAX_EVENT_TEXT", "LoopManager", "LoopSettings", "ProviderResolver", "RootOf"]

log = logging.getLogger("jidocode.prd.loop")

#: ``(provider key, project id, config) -> Provider``.
ProviderResolver = Callable[[str, str, PrdConfig], Provider]
#: ``project id -> its root`` (the registry's record; ``NotFound``/``Conflict`` when not running).
RootOf = Callable[[str], Awaitable[Path]]
#: ``root -> config`` (the default reads the files: :func:`config.load_config`).
ConfigOf = Callable[[Path], PrdConfig]
#: ``root -> warnings`` about its configuration (:func:`config.config_warnings`).
WarningsOf = Callable[[Path], list[str]]

#: Seconds a takeover waits for the last owner's iteration to be abandoned before it goes on.
ABANDON_S: Final = 15.0


class LoopManager:
    """Every PRD loop this replica runs, and the claim/recovery around them."""

    def __init__(
        self,
        bus: Bus,
        store: LoopStore,
        *,
        root_of: RootOf,
        resolve_provider: ProviderResolver,
        config_of: ConfigOf | None = None,
        warnings_of: WarningsOf | None = None,
        settings: LoopSettings | None = None,
        owner: str | None = None,
    ) -> None:
        self.bus = bus
        self.store = store
        self.root_of = root_of
        self.resolve_provider = resolve_provider
        self.config_of: ConfigOf = config_of or (lambda root: load_config(str(root)))
        self.warnings_of: WarningsOf = warnings_of or (
            lambda root: config_warnings(load_config_report(str(root)))
        )
        self.settings = settings or LoopSettings()
        self.owner = owner or bus.source
        self.loops: dict[tuple[str, str], RunningLoop] = {}
        #: The owners' leases (decision 0319), and when this replica saw each one last change.
        self.leases = store.leases(self.settings.lease_s)
        self.sightings = Sightings(self.settings.lease_s)
        self._scanner: asyncio.Task[None] | None = None
        self._closing = False
        #: One git preparation at a time per repository on this replica.
        self._git_locks: dict[str, asyncio.Lock] = {}

    # -- commands ------------------------------------------------------------------------------------

    async def run(self, project_id: str, cmd: RunPrd) -> LoopInfo:
        """Start a new loop of ``cmd.name`` (``Conflict`` when one holds the PRD)."""
        root = await self.root_of(project_id)
        paths = files.PrdPaths(root, cmd.name)
        prd = files.load_prd(paths.prd_json)  # NotFound / InvalidInput before anything else
        await self._quiet(project_id, cmd.name)
        current = await self.store.get(project_id, cmd.name)
        refusal = run_refusal(cmd.name, current.record.info if current is not None else None)
        if refusal is not None:
            raise refusal
        options = RunOptions.of(cmd)
        config = self.config_of(root)
        provider = self.resolve_provider(options.provider or config.provider, project_id, config)
        # one preparation and claim at a time per repository on this replica: `git worktree add`
        # races itself, and the work-dir check must see the claim of the run before it
        async with self._git_locks.setdefault(str(root), asyncio.Lock()):
            work_dir, branch, created, base = await prepare(
                self.store, project_id, root, prd, options, config, current
            )
            info = LoopInfo(
                project_id=project_id,
                prd=cmd.name,
                state="running",
                provider=provider.name(),
                model=options.model or config.model,
                work_dir=str(work_dir),
                branch=branch,
                owner=self.owner,
                seq=current.record.info.seq if current else 0,
                warnings=self.warnings_of(root),
            )
            record = LoopRecord(info=info, options=options, created_branch=created, base_branch=base)
            stored = await self.store.claim(record)
        held = await self._seize(stored)
        loop = await self._start(project_id, root, stored, config, provider, "ready", held)
        return loop.info

    async def pause(self, project_id: str, name: str) -> LoopInfo:
        return await self._halt(project_id, name, "paused", "")

    async def stop(self, project_id: str, name: str, reason: str = "") -> LoopInfo:
        return await self._halt(project_id, name, "stopped", reason)

    async def resume(self, project_id: str, name: str) -> LoopInfo:
        await self._quiet(project_id, name)
        current = await self._record(project_id, name)
        info = current.record.info
        refusal = resume_refusal(name, info)
        if refusal is not None:
            raise refusal
        root = await self.root_of(project_id)
        config = self.config_of(root)
        provider = self.resolve_provider(
            current.record.options.provider or config.provider, project_id, config
        )
        record = current.record.model_copy(
            update={
                "info": info.model_copy(update={"state": "running", "owner": self.owner, "error": ""}),
                "request": "",
            }
        )
        try:
            stored = await self.store.put(current, record)
        except StaleRecord:
            raise Conflict(f"the loop of PRD {name!r} changed while resuming it; try again") from None
        held = await self._seize(stored)
        loop = await self._start(project_id, root, stored, config, provider, "paused", held)
        return loop.info

    async def _halt(self, project_id: str, name: str, target: LoopState, reason: str) -> LoopInfo:
        local = self.loops.get((project_id, name))
        if local is not None and not local.settled.is_set():
            local.want(target, reason)
            await asyncio.shield(local.settled.wait())
            return local.info
        await self._quiet(project_id, name)
        current = await self._record(project_id, name)
        info = current.record.info
        alive = not lease_lapsed(
            await self._sight(info), current.revision, self.leases.clock(), self.leases.ttl_s
        )
        plan = halt_plan(name, info, target, alive=alive, owner=self.owner)
        if plan == "done":
            return info
        if plan == "ask":
            return await self._ask_owner(current, target, reason)
        # paused here (stop it), or running with a dead owner: the record is changed right here
        root = await self.root_of(project_id)
        return await self._offline(project_id, root, current, target, reason)

    async def _quiet(self, project_id: str, name: str) -> None:
        """Wait for a loop of this replica that settled to end (its notices sent, its event log
        closed): one event writer per PRD (docs/decisions/0282)."""
        local = self.loops.get((project_id, name))
        if local is not None and local.settled.is_set() and local.task is not None:
            with contextlib.suppress(Exception):
                await asyncio.shield(local.task)

    async def _ask_owner(self, current: Stored, target: LoopState, reason: str) -> LoopInfo:
        """Another replica runs it: write the request into the record; its heartbeat applies it."""
        info = current.record.info
        record = current.record.model_copy(update={"request": target, "request_reason": reason})
        try:
            await self.store.put(current, record)
        except StaleRecord:
            raise Conflict(f"the loop of PRD {info.prd!r} changed; try again") from None
        give_up = time.monotonic() + 3 * self.settings.lease_s
        while time.monotonic() < give_up:
            await asyncio.sleep(min(0.2, self.settings.heartbeat_s))
            now = await self._record(info.project_id, info.prd)
            if now.record.info.state != "running":
                return now.record.info
        return (await self._record(info.project_id, info.prd)).record.info

    async def _offline(
        self, project_id: str, root: Path, current: Stored, target: LoopState, reason: str
    ) -> LoopInfo:
        """A transition of a loop no replica runs (a paused one; one whose owner died)."""
        info = current.record.info
        events = await self._events(project_id, root, info)
        try:
            new = info.model_copy(
                update={"state": target, "owner": "", "error": reason, "seq": events.seq + 1}
            )
            record = current.record.model_copy(update={"info": new, "request": ""})
            try:
                stored = await self.store.put(current, record)
            except StaleRecord:
                raise Conflict(f"the loop of PRD {info.prd!r} changed; try again") from None
            await events.emit(PrdLoopStateChanged, from_state=info.state, to_state=target, reason=reason)
        finally:
            await events.close()
        if info.state == "running":  # its owner died mid-attempt: stop what it left running
            try:
                _, provider = self._provider_of(project_id, root, current.record)
            except JidoError as exc:
                log.warning("iteration of %s/%s not abandoned: %s", project_id, info.prd, exc.message)
            else:
                await self._abandon(provider, current.record, root)
        return stored.record.info

    async def _events(self, project_id: str, root: Path, info: LoopInfo) -> EventLog:
        """The PRD's event log, numbering on from the record's ``seq``."""
        return await EventLog.open(
            self.bus,
            project_id,
            info.prd,
            files.PrdPaths(root, info.prd).events_jsonl,
            record_seq=info.seq,
            queue_size=self.settings.queue_size,
        )

    def _provider_of(self, project_id: str, root: Path, record: LoopRecord) -> tuple[PrdConfig, Provider]:
        """The configuration and the provider a stored loop runs with (its run option, else the
        configured one)."""
        config = self.config_of(root)
        return config, self.resolve_provider(record.options.provider or config.provider, project_id, config)

    async def _record(self, project_id: str, name: str) -> Stored:
        current = await self.store.get(project_id, name)
        if current is None:
            raise NotFound(
                f"PRD {name!r} has no loop: start one with run",
                details={"prd": name, "project_id": project_id},
            )
        return current

    def holds(self, project_id: str, name: str) -> bool:
        loop = self.loops.get((project_id, name))
        return loop is not None and not loop.settled.is_set()

    # -- the owner's lease -----------------------------------------------------------------------------

    async def _sight(self, info: LoopInfo) -> Seen:
        """The loop's lease as it is now, noted: since when this replica sees it unchanged."""
        key = lease_key(info.project_id, info.prd)
        seen = await self.leases.read(key)
        return self.sightings.note(key, seen.revision, seen.holder, seen.since)

    async def _seize(self, stored: Stored) -> Held:
        """Hold the lease of a loop whose record this replica just made its own (claimed or
        resumed by compare-and-set, so nobody else runs it): whoever the lease still names (the
        last owner, between its last write and its release) is overwritten."""
        info = stored.record.info
        key = lease_key(info.project_id, info.prd)
        for _ in range(3):  # the last owner's renewal or release may land in between
            seen = await self.leases.read(key)
            taken = await self.leases.take(key, self.owner, dataclasses.replace(seen, holder=None))
            if isinstance(taken, Held):
                return taken
        error = Conflict(f"the lease of PRD {info.prd!r}'s loop kept changing while taking it; try again")
        await self._unstarted(stored, error)
        raise error

    async def _free(self, held: Held) -> None:
        """Delete a lease this replica holds but does not keep (a loop that did not start)."""
        try:
            await self.leases.release(held)
        except BUS_ERRORS as exc:
            log.warning("could not free lease %s: %s", held.key, exc)

    # -- running ---------------------------------------------------------------------------------------

    async def _start(
        self,
        project_id: str,
        root: Path,
        stored: Stored,
        config: PrdConfig,
        provider: Provider,
        from_state: LoopState,
        held: Held,
    ) -> RunningLoop:
        info = stored.record.info
        try:
            events = await self._events(project_id, root, info)
        except JidoError as exc:
            await self._unstarted(stored, exc)
            await self._free(held)
            raise
        loop = RunningLoop(
            store=self.store,
            owner=self.owner,
            settings=self.settings,
            project_id=project_id,
            root=root,
            name=info.prd,
            stored=stored,
            options=stored.record.options,
            config=config,
            provider=provider,
            work_dir=Path(info.work_dir or root),
            events=events,
            failed_checks=stored.record.failed_checks,
        )
        self.loops[(project_id, info.prd)] = loop
        loop.lease = KeptLease(self.leases, held, period_s=self.settings.heartbeat_s, on_lost=loop.lose)
        loop.task = asyncio.create_task(self._drive(loop, from_state), name=f"prd-loop-{info.prd}")
        loop.heartbeat = asyncio.create_task(loop.beat(), name=f"prd-heartbeat-{info.prd}")
        return loop

    async def _unstarted(self, stored: Stored, exc: JidoError) -> None:
        """A claimed loop that could not start (its event log refused: a link, a foreign file) ends in
        ``error`` with the reason, so the next ``run`` is not refused as a running loop's until its
        lease runs out, and recovery does not retry it every scan."""
        info = stored.record.info
        new = info.model_copy(update={"state": "error", "owner": "", "error": exc.message})
        record = stored.record.model_copy(update={"info": new, "request": ""})
        try:
            await self.store.put(stored, record)
        except StaleRecord:
            log.warning("loop record of %s/%s changed before its start failed", info.project_id, info.prd)

    async def _drive(self, loop: RunningLoop, from_state: LoopState) -> None:
        try:
            await loop.main(from_state)
            await loop.notify()
        finally:
            if loop.heartbeat is not None:
                loop.heartbeat.cancel()
            if not self._closing:
                await loop.events.close()
                if loop.lease is not None:
                    await loop.lease.release()  # a lease taken over meanwhile is left alone
                if self.loops.get((loop.project_id, loop.name)) is loop:
                    del self.loops[(loop.project_id, loop.name)]

    async def recover(self) -> list[str]:
        """Take over ``running`` loops whose owner's lease lapsed (:func:`.loop_rules.lease_lapsed`,
        as this replica's scans saw it), and resume them here."""
        resumed: list[str] = []
        running = await self.store.running()
        scanned = {lease_key(s.record.info.project_id, s.record.info.prd) for s in running}
        # forget the loops that stopped running (the sightings of a replica's life stay small)
        self.sightings.seen = {k: seen for k, seen in self.sightings.seen.items() if k in scanned}
        for stored in running:
            info = stored.record.info
            if (info.project_id, info.prd) in self.loops:
                continue
            lease = await self._sight(info)
            if not lease_lapsed(lease, stored.revision, self.leases.clock(), self.leases.ttl_s):
                continue
            if await self._take_over(stored, lease):
                resumed.append(f"{info.project_id}.{info.prd}")
        return resumed

    async def _take_over(self, stale: Stored, lease: Seen) -> bool:
        """Take the lease of a loop whose owner is gone (one replica wins), name this replica in
        its record and run it here; whether it runs here now."""
        info = stale.record.info
        try:
            root = await self.root_of(info.project_id)
            config, provider = self._provider_of(info.project_id, root, stale.record)
        except JidoError as exc:
            log.warning("cannot resume %s/%s: %s", info.project_id, info.prd, exc.message)
            return False
        held = await self.leases.take(lease_key(info.project_id, info.prd), self.owner, lease)
        if not isinstance(held, Held):
            return False  # another replica won
        taken = await self.store.take_over(stale, self.owner)
        if taken is None:
            await self._free(held)  # the record changed since the scan read it
            return False
        log.info("resuming PRD loop %s/%s (was %s)", info.project_id, info.prd, info.owner or "released")
        await self._abandon(provider, taken.record, root)
        try:
            await self._start(info.project_id, root, taken, config, provider, "running", held)
        except JidoError as exc:
            log.warning("cannot resume %s/%s: %s", info.project_id, info.prd, exc.message)
            return False
        return True

    async def _abandon(self, provider: Provider, record: LoopRecord, root: Path) -> None:
        """Stop the iteration the last owner left running, before the attempt runs again here
        (best effort: bounded, and logged when it fails; a dead owner's iteration that cannot be
        reached runs to its end, as before)."""
        if not record.iteration_id or not isinstance(provider, Abandons):
            return
        info = record.info
        try:
            async with asyncio.timeout(ABANDON_S):
                await provider.abandon(record.iteration_id, info.work_dir or str(root))
        except (JidoError, TimeoutError, OSError) as exc:
            log.warning(
                "iteration %s of %s/%s not abandoned: %s", record.iteration_id, info.project_id, info.prd, exc
            )
        else:
            log.info("abandoned iteration %s of %s/%s", record.iteration_id, info.project_id, info.prd)

    def start_recovery(self) -> None:
        """Scan at once, then every ``lease_s / 2``."""
        self._scanner = asyncio.create_task(self._scan(), name="prd-recovery")

    async def _scan(self) -> None:
        while True:
            try:
                await self.recover()
            except JidoError as exc:
                log.warning("recovery scan failed: %s", exc.message)
            except Exception:
                log.exception("recovery scan failed")
            await asyncio.sleep(self.settings.lease_s / 2)

    async def _release(self, loop: RunningLoop) -> None:
        """Leave a loop ``running`` for the next owner: its record counts the events written,
        then its lease is deleted (after that write, so another replica takes it at once)."""
        try:
            await self._count_events(loop)
        except JidoError as exc:
            log.warning("could not release %s/%s: %s", loop.project_id, loop.name, exc.message)
        if loop.lease is not None:
            await loop.lease.release()

    async def _count_events(self, loop: RunningLoop) -> None:
        """Write the events ``loop`` wrote into its record, if it is still this replica's and running."""
        current = await self.store.get(loop.project_id, loop.name)
        if current is None:
            return
        info = current.record.info
        if info.owner != self.owner or info.state != "running":
            return
        info = info.model_copy(update={"seq": max(info.seq, loop.events.seq)})
        await self.store.put(current, current.record.model_copy(update={"info": info}))

    async def close(self) -> None:
        """Stop this replica's loops without changing their state: each record stays ``running``
        with its lease deleted, so the next start (or another replica) resumes it at once."""
        self._closing = True
        if self._scanner is not None:
            self._scanner.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._scanner
        for loop in list(self.loops.values()):
            for task in (loop.task, loop.heartbeat):
                if task is not None:
                    task.cancel()
            for task in (loop.task, loop.heartbeat):
                if task is not None:
                    with contextlib.suppress(asyncio.CancelledError, Exception):
                        await task
            with contextlib.suppress(Exception):
                await asyncio.wait_for(loop.events.close(), 10)
            if not loop.lost:
                await self._release(loop)
            elif loop.lease is not None:
                await loop.lease.stop()
        self.loops.clear()
