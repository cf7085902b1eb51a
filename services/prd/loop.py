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
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, TypeVar

from jidocode.shared.bus import Bus
from jidocode.shared.envelope import new_id
from jidocode.shared.errors import Conflict, InvalidInput, JidoError, NotFound, PermissionDenied
from jidocode.shared.events.prd import (
    LoopInfo,
    LoopState,
    PrdAssistantText,
    PrdCommandOutput,
    PrdCommitted,
    PrdError,
    PrdIterationFinished,
    PrdIterationStarted,
    PrdLoopStateChanged,
    PrdQualityReport,
    PrdRetryScheduled,
    PrdStoryStateChanged,
    PrdToolFinished,
    PrdToolStarted,
    RunPrd,
)

from . import files, ops, quality
from .config import PrdConfig, load_config
from .eventlog import DEFAULT_QUEUE_SIZE, EventLog
from .git import GitRepo
from .model import Prd, UserStory
from .prompt import build_prompt
from .providers.base import (
    Abandons,
    IterationRequest,
    IterationResult,
    IterationRun,
    Provider,
    ProviderError,
    ProviderEvent,
)
from .states import TERMINAL
from .store import LoopRecord, LoopStore, RunOptions, StaleRecord, Stored

__all__ = ["MAX_EVENT_TEXT", "LoopManager", "LoopSettings", "ProviderResolver", "RootOf"]

log = logging.getLogger("jidocode.prd.loop")

T = TypeVar("T")

#: ``(provider key, project id, config) -> Provider``.
ProviderResolver = Callable[[str, str, PrdConfig], Provider]
#: ``project id -> its root`` (the registry's record; ``NotFound``/``Conflict`` when not running).
RootOf = Callable[[str], Awaitable[Path]]
#: ``root -> config`` (the default reads the files: :func:`config.load_config`).
ConfigOf = Callable[[Path], PrdConfig]

#: Characters of one text field of an event (the bus carries at most 1 MiB per message).
MAX_EVENT_TEXT: Final = 32_000
#: Characters of a failing check's output kept for the next attempt's prompt.
MAX_FAILURE_TEXT: Final = 16_000
#: States in which a loop holds its PRD (another ``run`` is refused).
_HELD: Final = frozenset({"ready", "running", "paused"})
#: Seconds a takeover waits for the last owner's iteration to be abandoned before it goes on.
ABANDON_S: Final = 15.0


@dataclass(frozen=True)
class LoopSettings:
    """Timing of ownership (validated here, before any I/O)."""

    #: How often the owner renews its heartbeat.
    heartbeat_s: float = 2.0
    #: A running loop whose heartbeat is older than this is taken over by another replica.
    lease_s: float = 10.0
    #: Events between a loop and its writer before the loop waits (backpressure).
    queue_size: int = DEFAULT_QUEUE_SIZE

    def __post_init__(self) -> None:
        if not 0 < self.heartbeat_s:
            raise ValueError(f"heartbeat_s must be > 0, got {self.heartbeat_s}")
        if not self.lease_s > 2 * self.heartbeat_s:
            raise ValueError(
                f"lease_s ({self.lease_s}) must be more than twice heartbeat_s ({self.heartbeat_s}): "
                "a live owner would lose its loops"
            )
        if self.queue_size < 1:
            raise ValueError(f"queue_size must be at least 1, got {self.queue_size}")

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None) -> LoopSettings:
        """``JIDO_PRD_HEARTBEAT_S``, ``JIDO_PRD_LEASE_S``, ``JIDO_PRD_EVENT_QUEUE`` (defaults otherwise)."""
        env = dict(os.environ) if env is None else env
        try:
            return cls(
                heartbeat_s=float(env.get("JIDO_PRD_HEARTBEAT_S", cls.heartbeat_s)),
                lease_s=float(env.get("JIDO_PRD_LEASE_S", cls.lease_s)),
                queue_size=int(env.get("JIDO_PRD_EVENT_QUEUE", cls.queue_size)),
            )
        except ValueError as exc:
            raise InvalidInput(f"PRD loop settings: {exc}") from None


class _Interrupted(Exception):
    """Pause or stop arrived: what was in flight is cancelled."""


class _Lost(Exception):
    """Another replica (or a user action elsewhere) changed the record: this loop is not ours."""


class _Failed(Exception):
    """The loop ends in ``error``."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message


@dataclass
class _Attempt:
    ok: bool
    kind: str = ""
    reason: str = ""
    failure_text: str = ""


@dataclass
class _Loop:
    """One PRD's loop running on this replica."""

    manager: LoopManager
    project_id: str
    root: Path
    name: str
    stored: Stored
    options: RunOptions
    config: PrdConfig
    provider: Provider
    work_dir: Path
    events: EventLog
    #: ``paused`` or ``stopped`` once asked.
    wanted: LoopState | None = None
    reason: str = ""
    interrupt: asyncio.Event = field(default_factory=asyncio.Event)
    #: Set when the loop has left ``running`` (or was lost).
    settled: asyncio.Event = field(default_factory=asyncio.Event)
    task: asyncio.Task[None] | None = None
    heartbeat: asyncio.Task[None] | None = None
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    failed_checks: str = ""
    lost: bool = False

    @property
    def paths(self) -> files.PrdPaths:
        return files.PrdPaths(self.root, self.name)

    @property
    def info(self) -> LoopInfo:
        return self.stored.record.info

    # -- persistence -------------------------------------------------------------------------------

    async def save(
        self, *, failed_checks: str | None = None, iteration_id: str | None = None, **update: Any
    ) -> LoopInfo:
        """Write the record with ``update`` applied to its info (CAS); ``_Lost`` when it is not
        ours any more. A changed record that is still ours (a pause/stop asked through it by
        another replica) is taken in and written again."""
        async with self.lock:
            for _ in range(5):
                info = self.info.model_copy(update={**update, "seq": self.events.seq})
                changes: dict[str, Any] = {"info": info, "heartbeat_at": time.time()}
                if "state" in update:
                    changes["request"] = ""
                    changes["request_reason"] = ""
                if failed_checks is not None:
                    changes["failed_checks"] = failed_checks
                if iteration_id is not None:
                    changes["iteration_id"] = iteration_id
                record = self.stored.record.model_copy(update=changes)
                try:
                    self.stored = await self.manager.store.put(self.stored, record)
                    return self.info
                except StaleRecord:
                    await self._reconcile()
            raise _Lost(self.name)

    async def _reconcile(self) -> None:
        """The record changed under us: a request from another replica (noted), or lost."""
        current = await self.manager.store.get(self.project_id, self.name)
        if current is None or current.record.info.owner != self.manager.owner:
            self.lost = True
            self.interrupt.set()
            raise _Lost(self.name)
        self.stored = current
        request = current.record.request
        if request in ("paused", "stopped") and self.wanted is None:
            self.wanted = "paused" if request == "paused" else "stopped"
            self.reason = current.record.request_reason
            self.interrupt.set()

    async def beat(self) -> None:
        """Renew the heartbeat every ``heartbeat_s`` (also how a remote pause/stop is noticed)."""
        while True:
            await asyncio.sleep(self.manager.settings.heartbeat_s)
            try:
                await self.save()
            except _Lost:
                log.warning("loop %s/%s was taken over elsewhere; leaving it", self.project_id, self.name)
                return
            except JidoError as exc:
                log.warning("heartbeat of %s/%s failed: %s", self.project_id, self.name, exc.message)

    def load(self) -> Prd:
        return files.load_prd(self.paths.prd_json)

    def save_prd(self, prd: Prd) -> None:
        files.save_prd(self.paths.prd_json, prd)

    # -- the loop ------------------------------------------------------------------------------------

    async def main(self, from_state: LoopState) -> None:
        try:
            await self.save(state="running", owner=self.manager.owner, error="")
            if from_state != "running":  # a loop taken over after a crash did not change state
                await self.events.emit(PrdLoopStateChanged, from_state=from_state, to_state="running")
            while True:
                if self.wanted is not None:
                    raise _Interrupted
                prd = self.load()  # 1
                story = ops.next_story(prd)  # 2
                if story is None:
                    await self.finish("completed", "every story passed")
                    return
                await self.work(prd, story)
        except _Interrupted:
            await self.finish(self.wanted or "stopped", self.reason)
        except _Lost:
            pass
        except _Failed as exc:
            await self.fail(exc.kind, exc.message)
        except asyncio.CancelledError:
            raise  # the service is stopping: the record stays running for the next owner
        except JidoError as exc:
            await self.fail("internal", exc.message)
        except Exception as exc:
            log.exception("loop %s/%s failed", self.project_id, self.name)
            await self.fail("internal", f"{type(exc).__name__}: {exc}")
        finally:
            self.settled.set()

    async def finish(self, state: LoopState, reason: str) -> None:
        with contextlib.suppress(_Lost):
            await self.save(state=state, owner="", error=reason if state != "completed" else "")
            await self.events.emit(PrdLoopStateChanged, from_state="running", to_state=state, reason=reason)
            await self.events.flush()
            await self.save()  # and after: the record's seq then counts the state event itself

    async def fail(self, kind: str, message: str) -> None:
        message = message[:2000]
        with contextlib.suppress(_Lost):
            await self.save(state="error", owner="", error=message)
            await self.events.emit(
                PrdError, story_id=self.info.story_id, attempt=self.info.attempt, kind=kind, message=message
            )
            await self.events.emit(
                PrdLoopStateChanged, from_state="running", to_state="error", reason=message
            )
            await self.events.flush()
            await self.save()  # and after: the record's seq then counts the state event itself

    async def work(self, prd: Prd, story: UserStory) -> None:
        """Steps 3-9 for one story, with its retries."""
        if not story.in_progress:  # 3
            prd = ops.mark_in_progress(prd, story.id)
            self.save_prd(prd)
            await self.save(story_id=story.id, attempt=0)
            await self.events.emit(
                PrdStoryStateChanged, story_id=story.id, from_state="pending", to_state="in_progress"
            )
        # a resumed story redoes the attempt that was cut (it did not fail)
        attempt = self.info.attempt if self.info.story_id == story.id and self.info.attempt else 1
        policy = self.config.retry
        while True:
            # the iteration's name is stored before it starts (one write with the attempt's), so
            # whoever takes the loop over can stop it (LoopManager.recover)
            await self.save(story_id=story.id, attempt=attempt, iteration_id=new_id().lower())
            outcome = await self.attempt(prd, story, attempt)
            if outcome.ok:
                return
            note = f"attempt {attempt}: {outcome.reason}"[:500]
            self.save_prd(ops.record_attempt(self.load(), story.id, note=note))
            delay = policy.delay_before(attempt) if policy.retryable(outcome.kind) else None
            if delay is None:
                why = "out of retries" if policy.retryable(outcome.kind) else "not retried"
                raise _Failed(
                    outcome.kind,
                    f"story {story.id} failed on attempt {attempt} ({why}): {outcome.reason}",
                )
            self.failed_checks = outcome.failure_text
            await self.save(failed_checks=self.failed_checks)
            await self.events.emit(
                PrdRetryScheduled,
                story_id=story.id,
                attempt=attempt,
                delay_s=delay,
                reason=outcome.reason[:2000],
            )
            await self.interruptible(asyncio.sleep(delay))
            attempt += 1

    async def attempt(self, prd: Prd, story: UserStory, attempt: int) -> _Attempt:
        """Steps 4-9 once."""
        progress = _read_text(self.paths.progress_md)
        prompt = build_prompt(  # 4
            prd, story, attempt=attempt, progress=progress, failed_checks=self.failed_checks
        )
        result, transcript = await self.iterate(story, attempt, prompt)  # 5
        files.append_agent_log(self.paths, f"{story.id} attempt {attempt}\n{transcript}")
        if not result.ok:
            kind = result.failure or "transient"
            reason = result.error or result.summary or f"the provider's iteration failed ({kind})"
            return _Attempt(False, kind, reason)
        report = await self.check(story, attempt)  # 6
        if not report.ok:
            failing = [c for c in report.checks if not c.ok]
            names = ", ".join(c.command for c in failing)
            text = "\n\n".join(f"$ {c.command}\n(exit {c.exit_code})\n{c.output}" for c in failing)
            return _Attempt(False, "checks", f"checks failed: {names}"[:500], text[-MAX_FAILURE_TEXT:])
        await self.complete(story, attempt, result)  # 7-9
        return _Attempt(True)

    async def interruptible(
        self, coro: Coroutine[Any, Any, T], on_cancel: Callable[[], Awaitable[None]] | None = None
    ) -> T:
        """Run ``coro`` until it ends or pause/stop arrives (then cancel it: ``_Interrupted``)."""
        task = asyncio.ensure_future(coro)
        waiter = asyncio.ensure_future(self.interrupt.wait())
        try:
            await asyncio.wait({task, waiter}, return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:  # the service is stopping: the step ends with the loop
            await _cut(task, on_cancel)
            raise
        finally:
            waiter.cancel()
        if task.done():
            return task.result()
        await _cut(task, on_cancel)
        if self.lost:
            raise _Lost(self.name)
        raise _Interrupted

    async def iterate(self, story: UserStory, attempt: int, prompt: str) -> tuple[IterationResult, str]:
        """Step 5: the provider's iteration, each event a loop event; the result and a transcript."""
        request = IterationRequest(
            work_dir=str(self.work_dir),
            prompt=prompt,
            context_files=[str(self.paths.prd_md), str(self.paths.progress_md)],
            approval_policy=self.config.approval_policy,
            sandbox_policy=self.config.sandbox_policy,
            model=self.options.model or self.config.model,
            metadata={
                "prd": self.name,
                "story_id": story.id,
                "attempt": str(attempt),
                "project_id": self.project_id,
                "iteration_id": self.stored.record.iteration_id,
            },
        )
        transcript: list[str] = []
        started = time.monotonic()
        run_box: list[IterationRun] = []

        async def _run() -> IterationResult:
            try:
                run = await self.provider.run_iteration(request)
            except ProviderError as exc:
                return IterationResult(ok=False, failure=exc.kind, error=exc.message)
            run_box.append(run)
            finished = False
            async for event in run.events():
                finished = finished or event.kind == "iteration_finished"
                await self.relay(event, story.id, attempt, transcript, started)
            result = await run.result()
            if not finished:
                await self.events.emit(
                    PrdIterationFinished,
                    story_id=story.id,
                    attempt=attempt,
                    ok=result.ok,
                    summary=_cap(result.summary),
                    duration_s=round(time.monotonic() - started, 3),
                    usage=result.usage,
                )
            return result

        async def _bounded() -> IterationResult:
            try:
                async with asyncio.timeout(self.config.iteration_timeout_s):
                    return await _run()
            except TimeoutError:
                if run_box:
                    await run_box[0].cancel()
                return IterationResult(
                    ok=False,
                    failure="transient",
                    error=f"the iteration took longer than {self.config.iteration_timeout_s:g} s",
                )
            except ProviderError as exc:
                return IterationResult(ok=False, failure=exc.kind, error=exc.message)

        async def _cancel() -> None:
            if run_box:
                await run_box[0].cancel()

        result = await self.interruptible(_bounded(), _cancel)
        return result, "\n".join(transcript)

    async def relay(
        self, event: ProviderEvent, story_id: str, attempt: int, transcript: list[str], started: float
    ) -> None:
        """One normalized provider event as its loop event (provider detail in ``metadata`` only)."""
        common: dict[str, Any] = {"story_id": story_id, "attempt": attempt, "metadata": event.metadata}
        kind = event.kind
        if kind == "iteration_started":
            await self.events.emit(
                PrdIterationStarted,
                provider=self.provider.name(),
                model=self.options.model or self.config.model,
                work_dir=str(self.work_dir),
                **common,
            )
        elif kind == "assistant_text":
            transcript.append(event.text)
            await self.events.emit(PrdAssistantText, text=_cap(event.text), **common)
        elif kind == "tool_started":
            transcript.append(f"[tool {event.tool}] {_cap(str(event.input), 500)}")
            await self.events.emit(
                PrdToolStarted,
                tool=event.tool or "?",
                call_id=event.call_id,
                input=_cap_input(event.input),
                **common,
            )
        elif kind == "tool_finished":
            await self.events.emit(
                PrdToolFinished,
                tool=event.tool or "?",
                call_id=event.call_id,
                ok=event.ok is not False,
                output=_cap(event.text),
                **common,
            )
        elif kind == "command_output":
            await self.events.emit(
                PrdCommandOutput,
                command=_cap(event.command, 4000),
                text=_cap(event.text),
                exit_code=event.exit_code,
                source="provider",
                **common,
            )
        elif kind == "iteration_finished":
            await self.events.emit(
                PrdIterationFinished,
                ok=event.ok is not False,
                summary=_cap(event.text),
                duration_s=round(time.monotonic() - started, 3),
                **common,
            )
        elif kind == "error":
            transcript.append(f"[error] {event.text}")
            await self.events.emit(
                PrdError, kind="provider", message=_cap(event.text or "provider error"), **common
            )

    async def check(self, story: UserStory, attempt: int) -> quality.QualityReport:
        """Step 6: the quality commands in the work dir (sandboxed), output streamed."""

        async def on_output(command: str, chunk: str) -> None:
            await self.events.emit(
                PrdCommandOutput,
                story_id=story.id,
                attempt=attempt,
                command=_cap(command, 4000),
                text=_cap(chunk),
                source="check",
            )

        report = await self.interruptible(
            quality.run_checks(
                str(self.work_dir),
                self.config.quality_commands,
                timeout_s=self.config.check_timeout_s,
                output_cap=self.config.check_output_cap,
                on_output=on_output,
            )
        )
        checks = [c.model_copy(update={"output": _cap(c.output, 8000)}) for c in report.checks]
        await self.events.emit(
            PrdQualityReport, story_id=story.id, attempt=attempt, ok=report.ok, checks=checks
        )
        return report

    async def complete(self, story: UserStory, attempt: int, result: IterationResult) -> None:
        """Steps 7-9: commit, mark passed, progress (not interrupted: a pause waits for it)."""
        note = ""
        if self.config.commit:
            message = f"{story.id}: {story.title}\n\nPRD {self.name}, attempt {attempt} (jidocode prd loop)"
            git = GitRepo(
                str(self.work_dir), root=str(self.root), allow_destructive=self.config.allow_destructive_git
            )
            try:
                commit = await git.commit_all(message)
            except JidoError as exc:
                raise _Failed("git", f"commit of story {story.id} failed: {exc.message}") from None
            if commit is None:
                note = "nothing changed: no commit"
            else:
                note = f"commit {commit.sha[:12]}"
                await self.events.emit(
                    PrdCommitted,
                    story_id=story.id,
                    attempt=attempt,
                    commit=commit.sha,
                    message=commit.message,
                    branch=self.info.branch,
                    files=commit.files[:500],
                )
        prd = ops.mark_passed(ops.record_attempt(self.load(), story.id), story.id)  # 8
        self.save_prd(prd)
        self.failed_checks = ""
        await self.save(story_id="", attempt=0, failed_checks="")
        await self.events.emit(
            PrdStoryStateChanged,
            story_id=story.id,
            attempt=attempt,
            from_state="in_progress",
            to_state="passed",
        )
        summary = (result.summary or "").strip()
        files.append_progress(  # 9
            self.paths,
            f"{story.id} {story.title}: passed on attempt {attempt}; {note or 'not committed (commit off)'}"
            + (f"\n\n{summary[:2000]}" if summary else ""),
        )


async def _cut(task: asyncio.Future[Any], on_cancel: Callable[[], Awaitable[None]] | None) -> None:
    """Cancel a step in flight: first its task (nothing of it is relayed any more), then the
    provider's own cancel (its conversation or process), bounded."""
    task.cancel()
    await asyncio.wait({task}, timeout=10)
    if on_cancel is not None:
        try:
            await asyncio.wait_for(asyncio.shield(on_cancel()), 15)
        except (TimeoutError, JidoError, ProviderError, OSError) as exc:
            log.warning("cancelling a provider's iteration failed: %s", exc)


def _cap(text: str, limit: int = MAX_EVENT_TEXT) -> str:
    return text if len(text) <= limit else text[:limit] + f"… [{len(text) - limit} more characters]"


def _cap_input(value: dict[str, object]) -> dict[str, object]:
    return {k: (_cap(v, 4000) if isinstance(v, str) else v) for k, v in list(value.items())[:50]}


def _read_text(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except FileNotFoundError:
        return ""


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
        settings: LoopSettings | None = None,
        owner: str | None = None,
    ) -> None:
        self.bus = bus
        self.store = store
        self.root_of = root_of
        self.resolve_provider = resolve_provider
        self.config_of: ConfigOf = config_of or (lambda root: load_config(str(root)))
        self.settings = settings or LoopSettings()
        self.owner = owner or bus.source
        self.loops: dict[tuple[str, str], _Loop] = {}
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
        current = await self.store.get(project_id, cmd.name)
        if current is not None and current.record.info.state in _HELD:
            info = current.record.info
            raise Conflict(
                f"the loop of PRD {cmd.name!r} is {info.state}"
                + (f" on {info.owner}" if info.owner else "")
                + ": one loop per PRD"
                + (" (resume or stop it)" if info.state == "paused" else " (stop it first)"),
                details={"prd": cmd.name, "state": info.state, "owner": info.owner},
            )
        options = RunOptions.of(cmd)
        config = self.config_of(root)
        provider = self.resolve_provider(options.provider or config.provider, project_id, config)
        # one preparation and claim at a time per repository on this replica: `git worktree add`
        # races itself, and the work-dir check must see the claim of the run before it
        async with self._git_locks.setdefault(str(root), asyncio.Lock()):
            work_dir, branch, created = await self._prepare(project_id, root, prd, options, config, current)
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
            )
            record = LoopRecord(info=info, options=options, heartbeat_at=time.time(), created_branch=created)
            stored = await self.store.claim(record)
        loop = await self._start(project_id, root, stored, config, provider, "ready")
        return loop.info

    async def pause(self, project_id: str, name: str) -> LoopInfo:
        return await self._halt(project_id, name, "paused", "")

    async def stop(self, project_id: str, name: str, reason: str = "") -> LoopInfo:
        return await self._halt(project_id, name, "stopped", reason)

    async def resume(self, project_id: str, name: str) -> LoopInfo:
        current = await self._record(project_id, name)
        info = current.record.info
        if info.state != "paused":
            raise Conflict(
                f"the loop of PRD {name!r} is {info.state}, not paused: "
                + ("it runs already" if info.state == "running" else "start a new one with run"),
                details={"prd": name, "state": info.state},
            )
        root = await self.root_of(project_id)
        config = self.config_of(root)
        provider = self.resolve_provider(
            current.record.options.provider or config.provider, project_id, config
        )
        record = current.record.model_copy(
            update={
                "info": info.model_copy(update={"state": "running", "owner": self.owner, "error": ""}),
                "heartbeat_at": time.time(),
                "request": "",
            }
        )
        try:
            stored = await self.store.put(current, record)
        except StaleRecord:
            raise Conflict(f"the loop of PRD {name!r} changed while resuming it; try again") from None
        loop = await self._start(project_id, root, stored, config, provider, "paused")
        return loop.info

    async def _halt(self, project_id: str, name: str, target: LoopState, reason: str) -> LoopInfo:
        local = self.loops.get((project_id, name))
        if local is not None and not local.settled.is_set():
            if local.wanted is None:
                local.wanted = target
                local.reason = reason
            elif target == "stopped":
                local.wanted, local.reason = "stopped", reason
            local.interrupt.set()
            await asyncio.shield(local.settled.wait())
            return local.info
        current = await self._record(project_id, name)
        info = current.record.info
        if info.state == target or (info.state in TERMINAL and target == "stopped"):
            return info
        if info.state in TERMINAL:
            raise Conflict(
                f"the loop of PRD {name!r} is {info.state}: there is nothing to pause",
                details={"prd": name, "state": info.state},
            )
        alive = info.state == "running" and not current.record.expired(time.time(), self.settings.lease_s)
        if alive and info.owner != self.owner:
            return await self._ask_owner(current, target, reason)
        # paused here (stop it), or running with a dead owner: the record is changed right here
        root = await self.root_of(project_id)
        return await self._offline(project_id, root, current, target, reason)

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
            record = current.record.model_copy(update={"info": new, "request": "", "heartbeat_at": 0.0})
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

    # -- preparation -----------------------------------------------------------------------------------

    async def _prepare(
        self,
        project_id: str,
        root: Path,
        prd: Prd,
        options: RunOptions,
        config: PrdConfig,
        previous: Stored | None,
    ) -> tuple[Path, str, str]:
        """The work dir and branch of a new loop, and the branch the loop created (``""``: none):
        git checks, the worktree, the branch. Git runs in the sandbox (``GitRepo``)."""
        git = GitRepo(str(root), allow_destructive=config.allow_destructive_git)
        if not await git.is_repo():
            raise InvalidInput(
                f"{root} is not a git repository: the PRD loop commits each passed story (it needs "
                "the project's own repository, .git in the project root)",
                details={"root": str(root)},
            )
        branch = options.branch or prd.branch_name
        ours = previous.record.created_branch if previous is not None else ""
        if options.worktree:
            work_dir = files.PrdPaths(root, prd.name).worktree
            branch = branch or f"prd/{prd.name}"
            git.worktree_path(str(work_dir))  # no link on the way (checked again by add_worktree)
            if not work_dir.exists():
                await self._trusted_branch(git, branch, options, ours)
                created = await git.add_worktree(str(work_dir), branch)
                return work_dir, branch, branch if created or branch == ours else ""
            tree = git.at(str(work_dir))
            await self._own_worktree(tree, root)
            await tree.ensure_clean(allow_dirty=options.allow_dirty)
            return work_dir, branch, ours
        await self._exclusive(project_id, prd.name, root)
        await git.ensure_clean(allow_dirty=options.allow_dirty)
        if branch and await git.current_branch() != branch:
            await self._trusted_branch(git, branch, options, ours)
            if await git.checkout_branch(branch):
                ours = branch
        return root, branch or await git.current_branch(), ours

    @staticmethod
    async def _own_worktree(tree: GitRepo, root: Path) -> None:
        """``InvalidInput`` unless ``tree`` (an existing ``.daedalus/worktrees/<name>``) is a
        worktree of the root's own repository: a plain directory there would have the loop
        commit to the root's branch, and a ``.git`` file pointing elsewhere to another repository."""
        try:
            ok = os.path.realpath(await tree.toplevel()) == os.path.realpath(tree.work_dir) and (
                os.path.realpath(await tree.common_dir()) == os.path.realpath(root / ".git")
            )
        except JidoError:
            ok = False
        if not ok:
            raise InvalidInput(
                f"{tree.work_dir} exists but is not a git worktree of {root} (remove it to start over)",
                details={"work_dir": tree.work_dir},
            )

    @staticmethod
    async def _trusted_branch(git: GitRepo, branch: str, options: RunOptions, ours: str) -> None:
        """``PermissionDenied`` for an existing branch the user did not name on the command line
        and an earlier loop of this PRD did not create: ``branchName`` comes from ``prd.json``,
        which the agent can edit, so it may name a branch the agent built."""
        if branch == options.branch or branch == ours or not await git.branch_exists(branch):
            return
        raise PermissionDenied(
            f"branch {branch!r} exists and was not created by this PRD's loop: the loop checks out "
            "only a branch it creates or one you name (run with --branch to use it)",
            details={"branch": branch},
        )

    async def _exclusive(self, project_id: str, name: str, work_dir: Path) -> None:
        """``Conflict`` when another PRD's loop holds ``work_dir`` (parallel PRDs need worktrees)."""
        for other in await self.store.records(project_id):
            info = other.record.info
            if info.prd != name and info.state in _HELD and Path(info.work_dir) == work_dir:
                raise Conflict(
                    f"PRD {info.prd!r} is {info.state} in {work_dir}: run PRDs in parallel only in "
                    "separate worktrees (run with worktree)",
                    details={"prd": name, "other": info.prd, "work_dir": str(work_dir)},
                )

    # -- running ---------------------------------------------------------------------------------------

    async def _start(
        self,
        project_id: str,
        root: Path,
        stored: Stored,
        config: PrdConfig,
        provider: Provider,
        from_state: LoopState,
    ) -> _Loop:
        info = stored.record.info
        try:
            events = await self._events(project_id, root, info)
        except JidoError as exc:
            await self._unstarted(stored, exc)
            raise
        loop = _Loop(
            manager=self,
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
        loop.task = asyncio.create_task(self._drive(loop, from_state), name=f"prd-loop-{info.prd}")
        loop.heartbeat = asyncio.create_task(loop.beat(), name=f"prd-heartbeat-{info.prd}")
        return loop

    async def _unstarted(self, stored: Stored, exc: JidoError) -> None:
        """A claimed loop that could not start (its event log refused: a link, a foreign file) ends in
        ``error`` with the reason, so the next ``run`` is not refused as a running loop's until its
        lease runs out, and recovery does not retry it every scan."""
        info = stored.record.info
        new = info.model_copy(update={"state": "error", "owner": "", "error": exc.message})
        record = stored.record.model_copy(update={"info": new, "request": "", "heartbeat_at": 0.0})
        try:
            await self.store.put(stored, record)
        except StaleRecord:
            log.warning("loop record of %s/%s changed before its start failed", info.project_id, info.prd)

    async def _drive(self, loop: _Loop, from_state: LoopState) -> None:
        try:
            await loop.main(from_state)
        finally:
            if loop.heartbeat is not None:
                loop.heartbeat.cancel()
            if not self._closing:
                await loop.events.close()
                if self.loops.get((loop.project_id, loop.name)) is loop:
                    del self.loops[(loop.project_id, loop.name)]

    async def recover(self) -> list[str]:
        """Take over ``running`` loops whose owner's lease expired, and resume them here."""
        resumed: list[str] = []
        for stale in await self.store.expired(self.settings.lease_s):
            info = stale.record.info
            if (info.project_id, info.prd) in self.loops:
                continue
            try:
                root = await self.root_of(info.project_id)
                config, provider = self._provider_of(info.project_id, root, stale.record)
            except JidoError as exc:
                log.warning("cannot resume %s/%s: %s", info.project_id, info.prd, exc.message)
                continue
            taken = await self.store.take_over(stale, self.owner)
            if taken is None:
                continue  # another replica won
            log.info("resuming PRD loop %s/%s (was %s)", info.project_id, info.prd, info.owner or "released")
            await self._abandon(provider, taken.record, root)
            try:
                await self._start(info.project_id, root, taken, config, provider, "running")
            except JidoError as exc:
                log.warning("cannot resume %s/%s: %s", info.project_id, info.prd, exc.message)
                continue
            resumed.append(f"{info.project_id}.{info.prd}")
        return resumed

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

    async def _release(self, loop: _Loop) -> None:
        """Clear the heartbeat of a loop left ``running`` (another replica may take it at once)."""
        try:
            current = await self.store.get(loop.project_id, loop.name)
            if current is None:
                return
            info = current.record.info
            if info.owner != self.owner or info.state != "running":
                return
            info = info.model_copy(update={"seq": max(info.seq, loop.events.seq)})
            await self.store.put(
                current, current.record.model_copy(update={"info": info, "heartbeat_at": 0.0})
            )
        except JidoError as exc:
            log.warning("could not release %s/%s: %s", loop.project_id, loop.name, exc.message)

    async def close(self) -> None:
        """Stop this replica's loops without changing their state: each record stays ``running``
        with its heartbeat cleared, so the next start (or another replica) resumes it at once."""
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
        self.loops.clear()
