"""One PRD's loop running on this replica: the seed's steps with their effects.

Steps 1-9 (see :mod:`.loop`) run here: the record and ``prd.json`` are written, events
emitted, the provider's iteration and the checks run, the story committed. What each result
means (retry, fail, which event) is decided by :mod:`.loop_rules`; the manager
(:class:`.loop.LoopManager`) claims, starts, halts and recovers loops.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from jidocode.shared.envelope import new_id
from jidocode.shared.errors import JidoError
from jidocode.shared.events.prd import (
    LoopInfo,
    LoopState,
    PrdCommandOutput,
    PrdCommitted,
    PrdError,
    PrdIterationFinished,
    PrdLoopStateChanged,
    PrdQualityReport,
    PrdRetryScheduled,
    PrdStoryStateChanged,
)
from jidocode.shared.lease import KeptLease
from jidocode.shared.lease import Lost as LeaseLost

from . import files, ops, quality
from .config import NOTIFY_STATES, PrdConfig
from .eventlog import EventLog
from .git import GitRepo
from .loop_files import stage_prd_files
from .loop_rules import (
    Interrupted,
    LoopFailed,
    LoopSettings,
    Lost,
    Outcome,
    RelayContext,
    budget_reason,
    cap,
    checks_outcome,
    commit_message,
    cost_of,
    done_outcome,
    iteration_outcome,
    loop_event,
    nothing_done_outcome,
    progress_entry,
    record_changes,
    retry_delay,
    transcript_line,
)
from .model import Prd, UserStory
from .notify import Notice, send_notices
from .prompt import build_prompt
from .providers.base import IterationRequest, IterationResult, IterationRun, Provider, ProviderError
from .store import LoopStore, RunOptions, StaleRecord, Stored

__all__ = ["RunningLoop"]

log = logging.getLogger("jidocode.prd.loop")

T = TypeVar("T")


@dataclass
class RunningLoop:
    """One PRD's loop running on this replica (owned by ``owner`` while its record says so and
    its lease, ``lease``, is kept)."""

    store: LoopStore
    owner: str
    settings: LoopSettings
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
    #: The owner's lease (:func:`.store.lease_key`), renewed while the loop runs.
    lease: KeptLease | None = None
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    failed_checks: str = ""
    lost: bool = False

    @property
    def paths(self) -> files.PrdPaths:
        return files.PrdPaths(self.root, self.name)

    @property
    def info(self) -> LoopInfo:
        return self.stored.record.info

    def want(self, target: LoopState, reason: str) -> None:
        """Ask the loop to pause or stop (a stop overrides an earlier pause)."""
        if self.wanted is None or target == "stopped":
            self.wanted, self.reason = target, reason
        self.interrupt.set()

    # -- persistence -------------------------------------------------------------------------------

    async def save(
        self, *, failed_checks: str | None = None, iteration_id: str | None = None, **update: Any
    ) -> LoopInfo:
        """Write the record with ``update`` applied to its info (CAS); ``Lost`` when it is not
        ours any more. A changed record that is still ours (a pause/stop asked through it by
        another replica) is taken in and written again."""
        async with self.lock:
            for _ in range(5):
                changes = record_changes(
                    self.info,
                    update,
                    seq=self.events.seq,
                    failed_checks=failed_checks,
                    iteration_id=iteration_id,
                )
                try:
                    self.stored = await self.store.put(
                        self.stored, self.stored.record.model_copy(update=changes)
                    )
                    return self.info
                except StaleRecord:
                    await self._reconcile()
            raise Lost(self.name)

    def lose(self, lost: LeaseLost) -> None:
        """The lease was taken over elsewhere (this replica stalled past it): leave the loop."""
        log.warning("lease %s of %s/%s was taken over elsewhere", lost.key, self.project_id, self.name)
        self.lost = True
        self.interrupt.set()

    async def _reconcile(self) -> None:
        """The record changed under us: a request from another replica (noted), or lost."""
        current = await self.store.get(self.project_id, self.name)
        if current is None or current.record.info.owner != self.owner:
            self.lost = True
            self.interrupt.set()
            raise Lost(self.name)
        self.stored = current
        request = current.record.request
        if request in ("paused", "stopped") and self.wanted is None:
            self.wanted = "paused" if request == "paused" else "stopped"
            self.reason = current.record.request_reason
            self.interrupt.set()

    async def beat(self) -> None:
        """Write the record every ``heartbeat_s``: its event count, and how a pause/stop asked
        through it by another replica is noticed (the lease is renewed by :attr:`lease`)."""
        while True:
            await asyncio.sleep(self.settings.heartbeat_s)
            try:
                await self.save()
            except Lost:
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
        """The loop until no story is left, it is paused/stopped, it fails or it is lost."""
        try:
            await self._stories(from_state)
        except Interrupted:
            await self.finish(self.wanted or "stopped", self.reason)
        except Lost:
            pass
        except LoopFailed as exc:
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

    async def _stories(self, from_state: LoopState) -> None:
        await self.save(state="running", owner=self.owner, error="")
        if from_state != "running":  # a loop taken over after a crash did not change state
            await self.events.emit(PrdLoopStateChanged, from_state=from_state, to_state="running")
        while True:
            if self.lost:
                raise Lost(self.name)
            if self.wanted is not None:
                raise Interrupted
            prd = self.load()  # 1
            story = ops.next_story(prd)  # 2
            if story is None:
                await self.finish("completed", "every story passed")
                return
            await self.work(prd, story)

    async def finish(self, state: LoopState, reason: str) -> None:
        with contextlib.suppress(Lost):
            await self.save(state=state, owner="", error=reason if state != "completed" else "")
            await self.events.emit(PrdLoopStateChanged, from_state="running", to_state=state, reason=reason)
            await self.events.flush()
            await self.save()  # and after: the record's seq then counts the state event itself

    async def fail(self, kind: str, message: str) -> None:
        message = message[:2000]
        with contextlib.suppress(Lost):
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
        while True:
            self.within_budget()
            # the iteration's name is stored before it starts (one write with the attempt's), so
            # whoever takes the loop over can stop it (LoopManager.recover)
            await self.save(story_id=story.id, attempt=attempt, iteration_id=new_id().lower())
            outcome = await self.attempt(prd, story, attempt)
            if outcome.ok:
                return
            await self.retry(story, attempt, outcome)
            attempt += 1

    def within_budget(self) -> None:
        """Pause (``Interrupted``) before an iteration past a budget of the configuration."""
        reason = budget_reason(self.config, self.info)
        if reason is not None:
            self.want("paused", reason)
            raise Interrupted

    async def retry(self, story: UserStory, attempt: int, outcome: Outcome) -> None:
        """Note a failed attempt, then wait for the next one (``LoopFailed``: there is none)."""
        note = f"attempt {attempt}: {outcome.reason}"[:500]
        self.save_prd(ops.record_attempt(self.load(), story.id, note=note))
        delay = retry_delay(self.config.retry, outcome, story.id, attempt)
        self.failed_checks = outcome.failure_text
        await self.save(failed_checks=self.failed_checks)
        await self.events.emit(
            PrdRetryScheduled, story_id=story.id, attempt=attempt, delay_s=delay, reason=outcome.reason[:2000]
        )
        await self.interruptible(asyncio.sleep(delay))

    async def attempt(self, prd: Prd, story: UserStory, attempt: int) -> Outcome:
        """Steps 4-9 once."""
        progress = _read_text(self.paths.progress_md)
        prompt = build_prompt(  # 4
            prd, story, attempt=attempt, progress=progress, failed_checks=self.failed_checks
        )
        head = await self.git().head()
        result, transcript = await self.iterate(story, attempt, prompt)  # 5
        await self.save(
            iterations=self.info.iterations + 1, cost_usd=round(self.info.cost_usd + cost_of(result), 6)
        )
        files.append_agent_log(self.paths, f"{story.id} attempt {attempt}\n{transcript}")
        failed = iteration_outcome(result) or done_outcome(result, story.id)
        if failed is None:
            failed = await self.judge(story, attempt, head)  # 6
        if failed is not None:
            return failed
        await self.complete(story, attempt, result)  # 7-9
        return Outcome(True)

    async def judge(self, story: UserStory, attempt: int, head: str) -> Outcome | None:
        """Step 6: the checks, then whether the attempt did anything a check or a change shows
        (``head``: the commit before the iteration; a provider that committed changed something)."""
        report = await self.check(story, attempt)
        failed = checks_outcome(report)
        if failed is not None or report.checks:
            return failed
        git = self.git()
        changed = bool(await git.dirty_files()) or await git.head() != head
        return nothing_done_outcome(story.id, changed=changed, checks_ran=len(report.checks))

    def git(self) -> GitRepo:
        """The work dir's repository (git in the sandbox)."""
        return GitRepo(
            str(self.work_dir), root=str(self.root), allow_destructive=self.config.allow_destructive_git
        )

    async def interruptible(
        self, coro: Coroutine[Any, Any, T], on_cancel: Callable[[], Awaitable[None]] | None = None
    ) -> T:
        """Run ``coro`` until it ends or pause/stop arrives (then cancel it: ``Interrupted``)."""
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
            raise Lost(self.name)
        raise Interrupted

    # -- step 5: the provider's iteration ------------------------------------------------------------

    async def iterate(self, story: UserStory, attempt: int, prompt: str) -> tuple[IterationResult, str]:
        """Step 5: the provider's iteration, each event a loop event; the result and a transcript."""
        iteration = _Iteration(self, story, attempt, self._request(story, attempt, prompt))
        result = await self.interruptible(iteration.bounded(), iteration.cancel)
        return result, "\n".join(iteration.transcript)

    def _request(self, story: UserStory, attempt: int, prompt: str) -> IterationRequest:
        return IterationRequest(
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

    # -- steps 6-9 -------------------------------------------------------------------------------------

    async def check(self, story: UserStory, attempt: int) -> quality.QualityReport:
        """Step 6: the quality commands in the work dir (sandboxed), output streamed."""

        async def on_output(command: str, chunk: str) -> None:
            await self.events.emit(
                PrdCommandOutput,
                story_id=story.id,
                attempt=attempt,
                command=cap(command, 4000),
                text=cap(chunk),
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
        checks = [c.model_copy(update={"output": cap(c.output, 8000)}) for c in report.checks]
        await self.events.emit(
            PrdQualityReport, story_id=story.id, attempt=attempt, ok=report.ok, checks=checks
        )
        return report

    async def complete(self, story: UserStory, attempt: int, result: IterationResult) -> None:
        """Steps 7-9: commit, mark passed, progress (not interrupted: a pause waits for it); with
        ``commit_prd_files`` the story is marked passed and its progress written first, and both
        files go into its commit (undone when the commit fails)."""
        before = self.load()
        prd = ops.mark_passed(ops.record_attempt(before, story.id), story.id)  # 8
        summary = result.summary or ""
        if self.config.commit and self.config.commit_prd_files:
            self.save_prd(prd)
            files.append_progress(
                self.paths, progress_entry(story, attempt, "committed with this entry", summary)
            )
            try:
                await self.commit(story, attempt, with_prd_files=True)  # 7
            except LoopFailed as exc:
                self.save_prd(before)
                files.append_progress(self.paths, f"{story.id}: not passed after all: {exc.message}")
                raise
        else:
            note = await self.commit(story, attempt) if self.config.commit else ""  # 7
            self.save_prd(prd)
            files.append_progress(self.paths, progress_entry(story, attempt, note, summary))  # 9
        self.failed_checks = ""
        await self.save(story_id="", attempt=0, failed_checks="")
        await self.events.emit(
            PrdStoryStateChanged,
            story_id=story.id,
            attempt=attempt,
            from_state="in_progress",
            to_state="passed",
        )

    async def commit(self, story: UserStory, attempt: int, *, with_prd_files: bool = False) -> str:
        """Step 7: commit what the story changed (and the PRD's own files, copied into a
        worktree first: :mod:`.loop_files`); the note for ``progress.md``."""
        try:
            include = (
                await asyncio.to_thread(stage_prd_files, self.root, self.work_dir, self.name)
                if with_prd_files
                else ()
            )
            commit = await self.git().commit_all(commit_message(self.name, story, attempt), include=include)
        except JidoError as exc:
            raise LoopFailed("git", f"commit of story {story.id} failed: {exc.message}") from None
        if commit is None:
            return "nothing changed: no commit"
        await self.events.emit(
            PrdCommitted,
            story_id=story.id,
            attempt=attempt,
            commit=commit.sha,
            message=commit.message,
            branch=self.info.branch,
            files=commit.files[:500],
        )
        return f"commit {commit.sha[:12]}"

    async def notify(self) -> None:
        """The notices of the state the loop ended in (``notify``; after it settled, so a pause
        or stop answers first); a hook that failed is a ``prd.error`` of kind ``notify``."""
        info = self.info
        if self.lost or not self.config.notify or info.state not in NOTIFY_STATES:
            return
        notice = Notice(
            project_id=self.project_id,
            prd=self.name,
            state=info.state,
            reason=info.error or ("every story passed" if info.state == "completed" else ""),
            story_id=info.story_id,
            branch=info.branch,
            work_dir=str(self.work_dir),
            iterations=info.iterations,
            cost_usd=info.cost_usd,
        )
        failures = await send_notices(self.config.notify, notice)
        if not failures:
            return
        with contextlib.suppress(Lost):
            for line in failures:
                await self.events.emit(
                    PrdError, story_id=info.story_id, attempt=info.attempt, kind="notify", message=line
                )
            await self.events.flush()
            await self.save()


class _Iteration:
    """One provider iteration of an attempt: its events relayed, its time bounded, cancellable."""

    def __init__(self, loop: RunningLoop, story: UserStory, attempt: int, request: IterationRequest) -> None:
        self.loop = loop
        self.story = story
        self.attempt = attempt
        self.request = request
        self.transcript: list[str] = []
        self.started = time.monotonic()
        self.run: IterationRun | None = None

    async def bounded(self) -> IterationResult:
        """The iteration within the configured time; a timeout is a transient failure."""
        timeout_s = self.loop.config.iteration_timeout_s
        try:
            async with asyncio.timeout(timeout_s):
                return await self._run()
        except TimeoutError:
            await self.cancel()
            return IterationResult(
                ok=False, failure="transient", error=f"the iteration took longer than {timeout_s:g} s"
            )
        except ProviderError as exc:
            return IterationResult(ok=False, failure=exc.kind, error=exc.message)

    async def cancel(self) -> None:
        if self.run is not None:
            await self.run.cancel()

    async def _run(self) -> IterationResult:
        loop = self.loop
        try:
            self.run = await loop.provider.run_iteration(self.request)
        except ProviderError as exc:
            return IterationResult(ok=False, failure=exc.kind, error=exc.message)
        finished = False
        async for event in self.run.events():
            finished = finished or event.kind == "iteration_finished"
            line = transcript_line(event)
            if line is not None:
                self.transcript.append(line)
            relayed = loop_event(event, self._context())
            if relayed is not None:
                await loop.events.emit(relayed[0], **relayed[1])
        result = await self.run.result()
        if not finished:
            await loop.events.emit(
                PrdIterationFinished,
                story_id=self.story.id,
                attempt=self.attempt,
                ok=result.ok,
                summary=cap(result.summary),
                duration_s=round(time.monotonic() - self.started, 3),
                usage=result.usage,
            )
        return result

    def _context(self) -> RelayContext:
        loop = self.loop
        return RelayContext(
            story_id=self.story.id,
            attempt=self.attempt,
            provider=loop.provider.name(),
            model=loop.options.model or loop.config.model,
            work_dir=str(loop.work_dir),
            elapsed_s=time.monotonic() - self.started,
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


def _read_text(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except FileNotFoundError:
        return ""
