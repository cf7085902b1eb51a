"""PRD loop events (seed 004, Daedalus): the PRD service's commands, replies and loop events.

A PRD is a product requirements document worked story by story under
``<project>/.daedalus/prds/<name>/``. The ``prd`` service serves the commands
below on ``jido.prds.<p>.<verb>`` and publishes every loop transition and
every normalized provider event on ``jido.prd.<p>.<prd>.<type>`` (stream
``JIDO_PRD``), in order: each carries the PRD's own sequence number ``seq``,
the same number as its line in ``events.jsonl``.

Loop events share :class:`PrdEvent`'s fields. The seven normalized provider
events keep the seed's names (``prd.iteration_started`` …); provider-specific
detail travels only in ``metadata`` and no code depends on it.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field

from ._base import Command, EventModel

__all__ = [
    "EVENTS",
    "LOOP_STATES",
    "NORMALIZED_KINDS",
    "PRD_EVENTS",
    "STORY_STATES",
    "CheckOutcome",
    "CreatePrd",
    "FinishPrd",
    "GetPrd",
    "ListPrds",
    "LoopInfo",
    "LoopState",
    "NormalizedKind",
    "PausePrd",
    "PrdAssistantText",
    "PrdCommandOutput",
    "PrdCommitted",
    "PrdError",
    "PrdEvent",
    "PrdFinished",
    "PrdIterationFinished",
    "PrdIterationStarted",
    "PrdList",
    "PrdLoopStateChanged",
    "PrdQualityReport",
    "PrdRetryScheduled",
    "PrdStoryStateChanged",
    "PrdSummary",
    "PrdToolFinished",
    "PrdToolStarted",
    "PrdView",
    "ResetStory",
    "ResumePrd",
    "RunPrd",
    "StopPrd",
    "StoryDraft",
    "StoryState",
]

#: Loop states (seed 004): ``ready -> running``; ``running -> paused | stopped | error |
#: completed``; ``paused -> running`` (and ``paused -> stopped``: a paused loop can be stopped).
LoopState = Literal["ready", "running", "paused", "stopped", "error", "completed"]
LOOP_STATES: tuple[str, ...] = ("ready", "running", "paused", "stopped", "error", "completed")
#: Story states: ``pending -> in_progress -> passed``; back to ``pending`` only by ``reset_story``.
StoryState = Literal["pending", "in_progress", "passed"]
STORY_STATES: tuple[str, ...] = ("pending", "in_progress", "passed")
#: The seed's seven normalized provider events.
NormalizedKind = Literal[
    "iteration_started",
    "assistant_text",
    "tool_started",
    "tool_finished",
    "command_output",
    "iteration_finished",
    "error",
]
NORMALIZED_KINDS: tuple[str, ...] = (
    "iteration_started",
    "assistant_text",
    "tool_started",
    "tool_finished",
    "command_output",
    "iteration_finished",
    "error",
)

_NAME = r"^[A-Za-z0-9_\-]{1,64}$"


# --- replies --------------------------------------------------------------------------------------


class LoopInfo(EventModel):
    """A PRD's loop as the service keeps it (KV ``jido_prd_loops``)."""

    channel: ClassVar[str] = "reply"
    type: Literal["prd.loop"] = "prd.loop"
    project_id: str
    prd: str
    state: LoopState = "ready"
    #: The story being worked (empty between stories).
    story_id: str = ""
    #: Attempt of the story being worked, from 1.
    attempt: int = 0
    provider: str = ""
    model: str = ""
    #: Where the provider works: the project root, or the PRD's worktree.
    work_dir: str = ""
    branch: str = ""
    #: The replica running it (empty when no replica does).
    owner: str = ""
    #: What stopped it, for ``error`` (and the reason given to ``stop``).
    error: str = ""
    #: Sequence number of the last event published for this PRD.
    seq: int = 0
    updated_at: str = ""
    #: Provider iterations this loop ran (its ``max_iterations`` budget), resumes included.
    iterations: int = 0
    #: What those iterations cost in US dollars, as the providers reported it (``max_cost_usd``).
    cost_usd: float = 0.0
    #: What the user should know about how the loop was started (no quality commands configured,
    #: a project layer ignored), one line each.
    warnings: list[str] = Field(default_factory=list)


class PrdSummary(BaseModel):
    """One PRD of a project, as listed."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    name: str
    title: str = ""
    stories: int = 0
    passed: int = 0
    in_progress: str = ""
    #: The loop's state (``ready`` when none ever ran).
    state: LoopState = "ready"
    #: Why the PRD cannot be loaded (its files are bad), when that is so.
    problem: str = ""


class PrdList(EventModel):
    """Reply of ``jido.prds.<p>.list``."""

    channel: ClassVar[str] = "reply"
    type: Literal["prd.list"] = "prd.list"
    prds: list[PrdSummary] = Field(default_factory=list)


class PrdView(EventModel):
    """Reply of ``get``, ``create``, ``reset_story``: the PRD document and its loop."""

    channel: ClassVar[str] = "reply"
    type: Literal["prd.view"] = "prd.view"
    project_id: str
    name: str
    #: The directory of its files (``<root>/.daedalus/prds/<name>``).
    path: str
    #: ``prd.json`` as stored (camelCase keys, see ``docs/prd.schema.json``).
    prd: dict[str, Any] = Field(default_factory=dict)
    loop: LoopInfo | None = None
    #: What the user should know about the PRD's configuration (``create``: no quality commands).
    warnings: list[str] = Field(default_factory=list)


class PrdFinished(EventModel):
    """Reply of ``finish``: the PRD's branch merged, its worktree removed, the result pushed."""

    channel: ClassVar[str] = "reply"
    type: Literal["prd.finished"] = "prd.finished"
    project_id: str
    name: str
    #: The PRD's branch, and the branch it was merged into (the one its loop started from).
    branch: str
    into: str
    #: ``fast_forward``, ``merge_commit``, or ``up_to_date`` (nothing to merge).
    merge: Literal["fast_forward", "merge_commit", "up_to_date"]
    #: The commit ``into`` points at now.
    commit: str
    #: The worktree removed (empty when the loop worked in the project root).
    worktree_removed: str = ""
    #: The remote pushed to, and its URL (empty without ``push``).
    pushed_to: str = ""
    remote_url: str = ""


# --- commands -------------------------------------------------------------------------------------


class StoryDraft(BaseModel):
    """A story given to ``create`` (its id is minted when empty)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str = ""
    title: str = Field(min_length=1, max_length=200)
    description: str = Field(default="", max_length=20_000)
    acceptance_criteria: list[str] = Field(default_factory=list, max_length=64)
    priority: int = Field(default=1, ge=0, le=1_000_000)
    #: Already passed (an imported document keeps its progress: ``prd import``).
    passes: bool = False
    #: What earlier work learnt about the story (an imported document's ``notes``).
    notes: str = Field(default="", max_length=20_000)


class CreatePrd(Command[PrdView]):
    """Write a new PRD's files (refused when one of that name exists)."""

    type: Literal["prd.create"] = "prd.create"
    name: str = Field(pattern=_NAME)
    title: str = Field(default="", max_length=200)
    description: str = Field(default="", max_length=100_000)
    branch_name: str = Field(default="", max_length=200)
    stories: list[StoryDraft] = Field(default_factory=list, max_length=500)


class ListPrds(Command[PrdList]):
    type: Literal["prd.list_prds"] = "prd.list_prds"


class GetPrd(Command[PrdView]):
    type: Literal["prd.get"] = "prd.get"
    name: str = Field(pattern=_NAME)


class RunPrd(Command[LoopInfo]):
    """Start the PRD's loop (``Conflict`` when it is already running or paused)."""

    type: Literal["prd.run"] = "prd.run"
    name: str = Field(pattern=_NAME)
    #: Provider key (``jidocode``, ``codex``, ``claude``, ``gemini``); empty: the configured one.
    provider: str = Field(default="", max_length=64)
    model: str = Field(default="", max_length=200)
    #: Work in ``.daedalus/worktrees/<name>`` on its own branch (parallel PRDs need it).
    worktree: bool = False
    #: Branch to work on (created when missing); empty: the PRD's ``branchName`` or the current one.
    branch: str = Field(default="", max_length=200)
    #: Start even though the work tree has uncommitted changes.
    allow_dirty: bool = False


class PausePrd(Command[LoopInfo]):
    """Pause after the current step (the provider's iteration is cancelled, the story stays in progress)."""

    type: Literal["prd.pause"] = "prd.pause"
    name: str = Field(pattern=_NAME)


class ResumePrd(Command[LoopInfo]):
    type: Literal["prd.resume"] = "prd.resume"
    name: str = Field(pattern=_NAME)


class StopPrd(Command[LoopInfo]):
    type: Literal["prd.stop"] = "prd.stop"
    name: str = Field(pattern=_NAME)
    reason: str = Field(default="", max_length=500)


class ResetStory(Command[PrdView]):
    """The explicit user action that puts a story back to ``pending`` (refused while the loop runs)."""

    type: Literal["prd.reset_story"] = "prd.reset_story"
    name: str = Field(pattern=_NAME)
    story_id: str = Field(min_length=1, max_length=64)


class FinishPrd(Command[PrdFinished]):
    """Merge the PRD's branch into the branch its loop started from (a fast-forward or a merge
    commit; ``Conflict`` naming the files on a conflict), remove its worktree, and with ``push``
    push that branch to the remote (refused while its loop runs or is paused)."""

    type: Literal["prd.finish"] = "prd.finish"
    name: str = Field(pattern=_NAME)
    #: The branch to merge into; empty: the one the loop started from.
    into: str = Field(default="", max_length=200)
    push: bool = False
    #: The remote to push to; empty: ``branch.<into>.remote``, else ``origin``.
    remote: str = Field(default="", max_length=200)


# --- loop events (jido.prd.<p>.<prd>.<type>) --------------------------------------------------------


class PrdEvent(EventModel):
    """What every loop event carries."""

    channel: ClassVar[str] = "prd"
    project_id: str
    prd: str
    #: This PRD's event number, from 1, gapless: the line number in ``events.jsonl``.
    seq: int = Field(ge=1)
    story_id: str = ""
    attempt: int = 0
    #: Provider-specific detail only (never read by the loop).
    metadata: dict[str, str] = Field(default_factory=dict)


class PrdLoopStateChanged(PrdEvent):
    type: Literal["prd.loop.state_changed"] = "prd.loop.state_changed"
    from_state: LoopState
    to_state: LoopState
    reason: str = ""


class PrdStoryStateChanged(PrdEvent):
    type: Literal["prd.story.state_changed"] = "prd.story.state_changed"
    from_state: StoryState
    to_state: StoryState


class PrdIterationStarted(PrdEvent):
    type: Literal["prd.iteration_started"] = "prd.iteration_started"
    provider: str = ""
    model: str = ""
    work_dir: str = ""


class PrdAssistantText(PrdEvent):
    type: Literal["prd.assistant_text"] = "prd.assistant_text"
    text: str


class PrdToolStarted(PrdEvent):
    type: Literal["prd.tool_started"] = "prd.tool_started"
    tool: str
    call_id: str = ""
    input: dict[str, Any] = Field(default_factory=dict)


class PrdToolFinished(PrdEvent):
    type: Literal["prd.tool_finished"] = "prd.tool_finished"
    tool: str
    call_id: str = ""
    ok: bool = True
    output: str = ""


class PrdCommandOutput(PrdEvent):
    """Output of a command: one the provider ran, or a quality check (``source="check"``)."""

    type: Literal["prd.command_output"] = "prd.command_output"
    command: str = ""
    text: str = ""
    exit_code: int | None = None
    source: Literal["provider", "check"] = "provider"


class PrdIterationFinished(PrdEvent):
    type: Literal["prd.iteration_finished"] = "prd.iteration_finished"
    ok: bool
    summary: str = ""
    duration_s: float = 0.0
    usage: dict[str, int] = Field(default_factory=dict)


class PrdError(PrdEvent):
    type: Literal["prd.error"] = "prd.error"
    #: ``transient`` (retried), ``config``, ``provider``, ``checks``, ``git``, ``internal``.
    kind: str
    message: str
    retryable: bool = False


class CheckOutcome(BaseModel):
    """One quality command's result."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    command: str
    exit_code: int | None = None
    ok: bool
    output: str = ""
    truncated: bool = False
    timed_out: bool = False
    duration_s: float = 0.0
    sandbox: str = ""


class PrdQualityReport(PrdEvent):
    type: Literal["prd.quality.report"] = "prd.quality.report"
    ok: bool
    checks: list[CheckOutcome] = Field(default_factory=list)


class PrdCommitted(PrdEvent):
    type: Literal["prd.git.committed"] = "prd.git.committed"
    commit: str
    message: str
    branch: str = ""
    files: list[str] = Field(default_factory=list)


class PrdRetryScheduled(PrdEvent):
    type: Literal["prd.retry.scheduled"] = "prd.retry.scheduled"
    delay_s: float
    reason: str


#: The loop events, in the order a story usually sees them.
PRD_EVENTS: tuple[type[PrdEvent], ...] = (
    PrdLoopStateChanged,
    PrdStoryStateChanged,
    PrdIterationStarted,
    PrdAssistantText,
    PrdToolStarted,
    PrdToolFinished,
    PrdCommandOutput,
    PrdIterationFinished,
    PrdError,
    PrdQualityReport,
    PrdCommitted,
    PrdRetryScheduled,
)

EVENTS: tuple[type[EventModel], ...] = (
    LoopInfo,
    PrdList,
    PrdView,
    CreatePrd,
    ListPrds,
    GetPrd,
    RunPrd,
    PausePrd,
    ResumePrd,
    StopPrd,
    ResetStory,
    PrdFinished,
    FinishPrd,
    *PRD_EVENTS,
)
