"""The PRD loop's decisions as pure functions: no bus, no git, no files, no clock.

What an iteration's result or a quality report means for the attempt (:func:`iteration_outcome`,
:func:`checks_outcome`), whether a failed attempt is tried again and after how long
(:func:`retry_delay`), whether an attempt did its story at all (:func:`done_outcome`,
:func:`nothing_done_outcome`), when a budget pauses the loop (:func:`budget_reason`), which
loop event a provider event becomes (:func:`loop_event`), what the
loop writes into its record (:func:`record_changes`), the commit message and the progress entry
of a passed story, and which commands a loop's state refuses (:func:`run_refusal`,
:func:`resume_refusal`, :func:`halt_plan`). :mod:`.loop_run` and :mod:`.loop` do the effects
around them.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Final, Literal

from jidocode.shared.errors import Conflict, InvalidInput
from jidocode.shared.events.prd import (
    LoopInfo,
    LoopState,
    PrdAssistantText,
    PrdCommandOutput,
    PrdError,
    PrdEvent,
    PrdIterationFinished,
    PrdIterationStarted,
    PrdToolFinished,
    PrdToolStarted,
)
from jidocode.shared.lease import Seen, is_stale

from .config import PrdConfig
from .eventlog import DEFAULT_QUEUE_SIZE
from .model import UserStory
from .prompt import DONE_MARKER
from .providers.base import IterationResult, ProviderEvent
from .quality import QualityReport
from .retry import RetryPolicy
from .states import TERMINAL

__all__ = [
    "HELD",
    "MAX_EVENT_TEXT",
    "MAX_FAILURE_TEXT",
    "HaltPlan",
    "Interrupted",
    "LoopFailed",
    "LoopSettings",
    "Lost",
    "Outcome",
    "RelayContext",
    "budget_reason",
    "cap",
    "cap_input",
    "checks_outcome",
    "commit_message",
    "cost_of",
    "done_outcome",
    "halt_plan",
    "iteration_outcome",
    "lease_lapsed",
    "loop_event",
    "nothing_done_outcome",
    "progress_entry",
    "record_changes",
    "resume_refusal",
    "retry_delay",
    "run_refusal",
    "transcript_line",
]

#: Characters of one text field of an event (the bus carries at most 1 MiB per message).
MAX_EVENT_TEXT: Final = 32_000
#: Characters of a failing check's output kept for the next attempt's prompt.
MAX_FAILURE_TEXT: Final = 16_000
#: States in which a loop holds its PRD (another ``run`` is refused).
HELD: Final = frozenset({"ready", "running", "paused"})


@dataclass(frozen=True)
class LoopSettings:
    """Timing of ownership (validated here, before any I/O)."""

    #: How often the owner renews its lease and writes its record (the event count, and how a
    #: pause/stop asked through the record by another replica is noticed).
    heartbeat_s: float = 2.0
    #: A running loop whose lease went unrenewed this long is taken over by another replica.
    lease_s: float = 10.0
    #: Events between a loop and its writer before the loop waits (backpressure).
    queue_size: int = DEFAULT_QUEUE_SIZE

    def __post_init__(self) -> None:
        if not self.heartbeat_s > 0:
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


class Interrupted(Exception):
    """Pause or stop arrived: what was in flight is cancelled."""


class Lost(Exception):
    """Another replica (or a user action elsewhere) changed the record: this loop is not ours."""


class LoopFailed(Exception):
    """The loop ends in ``error``."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message


@dataclass(frozen=True)
class Outcome:
    """How one attempt at a story ended."""

    ok: bool
    kind: str = ""
    reason: str = ""
    #: The failing checks' output, for the next attempt's prompt.
    failure_text: str = ""


def cap(text: str, limit: int = MAX_EVENT_TEXT) -> str:
    """``text`` cut to ``limit`` characters, saying how many were left out."""
    return text if len(text) <= limit else text[:limit] + f"… [{len(text) - limit} more characters]"


def cap_input(value: dict[str, object]) -> dict[str, object]:
    """A tool's input for an event: its first 50 fields, each text cut to 4,000 characters."""
    return {k: (cap(v, 4000) if isinstance(v, str) else v) for k, v in list(value.items())[:50]}


def iteration_outcome(result: IterationResult) -> Outcome | None:
    """The failed attempt a failed iteration makes (``None``: the iteration succeeded)."""
    if result.ok:
        return None
    kind = result.failure or "transient"
    reason = result.error or result.summary or f"the provider's iteration failed ({kind})"
    return Outcome(False, kind, reason)


def checks_outcome(report: QualityReport) -> Outcome | None:
    """The failed attempt failing checks make, naming them (``None``: every check passed)."""
    if report.ok:
        return None
    failing = [c for c in report.checks if not c.ok]
    names = ", ".join(c.command for c in failing)
    text = "\n\n".join(f"$ {c.command}\n(exit {c.exit_code})\n{c.output}" for c in failing)
    return Outcome(False, "checks", f"checks failed: {names}"[:500], text[-MAX_FAILURE_TEXT:])


def done_outcome(result: IterationResult, story_id: str) -> Outcome | None:
    """The failed attempt an iteration makes that ended without saying its story is done
    (``None``: it said so, or the provider has no such signal and its status ``ok`` counts)."""
    if result.done is not False:
        return None
    return Outcome(
        False,
        "nothing_done",
        f"story {story_id}: the provider did not report the story done "
        f"(its final message did not end with {DONE_MARKER})",
        f"Your previous attempt did not end its final message with the line {DONE_MARKER}: finish "
        "the story, make its acceptance criteria hold, then end your final message with that line.",
    )


def nothing_done_outcome(story_id: str, *, changed: bool, checks_ran: int) -> Outcome | None:
    """The failed attempt an iteration makes that changed nothing while no quality check ran:
    nothing was done, and nothing checked it (``None``: one or the other happened)."""
    if changed or checks_ran:
        return None
    return Outcome(
        False,
        "nothing_done",
        f"story {story_id}: nothing changed and no quality check ran",
        "Your previous attempt changed no file (and no quality check is configured to verify the "
        "story otherwise): make the changes the story asks for.",
    )


def cost_of(result: IterationResult) -> float:
    """What an iteration cost in US dollars, as its provider reported it (``metadata.cost_usd``; 0
    when it did not, or reported something that is no finite, non-negative number)."""
    try:
        cost = float(result.metadata.get("cost_usd", "0"))
    except ValueError:
        return 0.0
    return cost if 0.0 <= cost < float("inf") else 0.0


def budget_reason(config: PrdConfig, info: LoopInfo) -> str | None:
    """Why the loop pauses before its next iteration: a budget of ``config`` is spent (``None``: it
    goes on). Budgets count the iterations of one loop (``info``: a run and its resumes)."""
    if config.max_iterations is not None and info.iterations >= config.max_iterations:
        return (
            f"budget reached: {info.iterations} iterations, max_iterations is {config.max_iterations} "
            "(raise prd.max_iterations, then resume)"
        )
    if config.max_cost_usd is not None and info.cost_usd >= config.max_cost_usd:
        return (
            f"budget reached: the iterations cost ${info.cost_usd:.4f}, max_cost_usd is "
            f"${config.max_cost_usd:g} (raise prd.max_cost_usd, then resume)"
        )
    return None


def retry_delay(policy: RetryPolicy, outcome: Outcome, story_id: str, attempt: int) -> float:
    """Seconds before the next attempt; :class:`LoopFailed` when the failure is not retried or
    the retries are spent."""
    retryable = policy.retryable(outcome.kind)
    delay = policy.delay_before(attempt) if retryable else None
    if delay is None:
        why = "out of retries" if retryable else "not retried"
        raise LoopFailed(
            outcome.kind, f"story {story_id} failed on attempt {attempt} ({why}): {outcome.reason}"
        )
    return delay


def record_changes(
    info: LoopInfo,
    update: dict[str, Any],
    *,
    seq: int,
    failed_checks: str | None = None,
    iteration_id: str | None = None,
) -> dict[str, Any]:
    """The fields of a loop record to write: ``update`` applied to its info (numbered ``seq``); a
    state change clears a pending request."""
    changes: dict[str, Any] = {
        "info": info.model_copy(update={**update, "seq": seq}),
    }
    if "state" in update:
        changes["request"] = ""
        changes["request_reason"] = ""
    if failed_checks is not None:
        changes["failed_checks"] = failed_checks
    if iteration_id is not None:
        changes["iteration_id"] = iteration_id
    return changes


@dataclass(frozen=True)
class RelayContext:
    """What a relayed provider event is told besides itself."""

    story_id: str
    attempt: int
    provider: str
    model: str
    work_dir: str
    #: Seconds since the iteration started.
    elapsed_s: float


def transcript_line(event: ProviderEvent) -> str | None:
    """The line a provider event adds to the attempt's transcript (``agent.log``), if any."""
    if event.kind == "assistant_text":
        return event.text
    if event.kind == "tool_started":
        return f"[tool {event.tool}] {cap(str(event.input), 500)}"
    if event.kind == "error":
        return f"[error] {event.text}"
    return None


def loop_event(event: ProviderEvent, ctx: RelayContext) -> tuple[type[PrdEvent], dict[str, Any]] | None:
    """A normalized provider event as its loop event's class and fields (provider detail in
    ``metadata`` only); ``None`` for a kind the loop does not relay."""
    common: dict[str, Any] = {"story_id": ctx.story_id, "attempt": ctx.attempt, "metadata": event.metadata}
    tool = event.tool or "?"
    match event.kind:
        case "iteration_started":
            return PrdIterationStarted, {
                "provider": ctx.provider,
                "model": ctx.model,
                "work_dir": ctx.work_dir,
                **common,
            }
        case "assistant_text":
            return PrdAssistantText, {"text": cap(event.text), **common}
        case "tool_started":
            return PrdToolStarted, {
                "tool": tool,
                "call_id": event.call_id,
                "input": cap_input(event.input),
                **common,
            }
        case "tool_finished":
            return PrdToolFinished, {
                "tool": tool,
                "call_id": event.call_id,
                "ok": event.ok is not False,
                "output": cap(event.text),
                **common,
            }
        case "command_output":
            return PrdCommandOutput, {
                "command": cap(event.command, 4000),
                "text": cap(event.text),
                "exit_code": event.exit_code,
                "source": "provider",
                **common,
            }
        case "iteration_finished":
            return PrdIterationFinished, {
                "ok": event.ok is not False,
                "summary": cap(event.text),
                "duration_s": round(ctx.elapsed_s, 3),
                **common,
            }
        case "error":
            return PrdError, {"kind": "provider", "message": cap(event.text or "provider error"), **common}
    return None


def commit_message(prd: str, story: UserStory, attempt: int) -> str:
    """The message of a passed story's commit."""
    return f"{story.id}: {story.title}\n\nPRD {prd}, attempt {attempt} (jidocode prd loop)"


def progress_entry(story: UserStory, attempt: int, note: str, summary: str) -> str:
    """A passed story's entry in ``progress.md`` (``note``: its commit, or why there is none)."""
    summary = summary.strip()
    return (
        f"{story.id} {story.title}: passed on attempt {attempt}; {note or 'not committed (commit off)'}"
        + (f"\n\n{summary[:2000]}" if summary else "")
    )


def run_refusal(name: str, info: LoopInfo | None) -> Conflict | None:
    """Why a new ``run`` of PRD ``name`` is refused while its loop is ``info`` (``None``: it is not)."""
    if info is None or info.state not in HELD:
        return None
    return Conflict(
        f"the loop of PRD {name!r} is {info.state}"
        + (f" on {info.owner}" if info.owner else "")
        + ": one loop per PRD"
        + (" (resume or stop it)" if info.state == "paused" else " (stop it first)"),
        details={"prd": name, "state": info.state, "owner": info.owner},
    )


def resume_refusal(name: str, info: LoopInfo) -> Conflict | None:
    """Why ``resume`` is refused for a loop that is ``info`` (``None``: it is paused)."""
    if info.state == "paused":
        return None
    return Conflict(
        f"the loop of PRD {name!r} is {info.state}, not paused: "
        + ("it runs already" if info.state == "running" else "start a new one with run"),
        details={"prd": name, "state": info.state},
    )


def lease_lapsed(lease: Seen, record_revision: int, now: float, lease_s: float) -> bool:
    """Whether the owner of a ``running`` loop whose lease was seen as ``lease`` (first seen at
    ``since``, on the reader's clock) and whose record is at ``record_revision`` is gone.

    A held lease: when nobody renewed it for ``lease_s``. A free one (released, expired, never
    written): at once when it was freed after the record's last write (a clean stop: the owner
    writes the record, then deletes its lease; record and lease are keys of one bucket, so their
    revisions compare); else only once it stayed free for ``lease_s`` (a replica that just claimed
    the record is about to take it, or died before it did)."""
    if lease.holder is not None:
        return is_stale(lease, now, lease_s)
    return lease.revision > record_revision or now - lease.since > lease_s


#: What a pause/stop of a loop no local task runs does: nothing (it is there already), ask the
#: live owner elsewhere, or change the record here (paused, or its owner died).
HaltPlan = Literal["done", "ask", "offline"]


def halt_plan(name: str, info: LoopInfo, target: LoopState, *, alive: bool, owner: str) -> HaltPlan:
    """How to bring a loop this replica does not run to ``target`` (``alive``: its owner's lease
    holds); ``Conflict`` when a finished loop is asked to pause."""
    if info.state == target or (info.state in TERMINAL and target == "stopped"):
        return "done"
    if info.state in TERMINAL:
        raise Conflict(
            f"the loop of PRD {name!r} is {info.state}: there is nothing to pause",
            details={"prd": name, "state": info.state},
        )
    if alive and info.state == "running" and info.owner != owner:
        return "ask"
    return "offline"
