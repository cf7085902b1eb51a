"""React: what follows an applied entry (new entries, built from the catalogue's models, and intents).

:func:`apply` evolves the state with an entry (``evolve.py``), emits it, then dispatches on its
typed event: one small function per event type that leads somewhere (a model call, a tool run,
a compaction, the turn's end). Entries the core generates are applied the same way, so one
outside signal may lead to several entries in one step.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import singledispatch

from jidocode.shared.events import EventModel
from jidocode.shared.events.conversation import (
    AssistantMessage,
    Cancel,
    Compact,
    CompactionCompleted,
    CompactionFailed,
    CompactionReason,
    CompactionRequested,
    ConversationError,
    LlmCompleted,
    LlmFailed,
    LlmRequested,
    LoopStopped,
    Resume,
    ToolCallCompleted,
    ToolCallFailed,
    ToolCallRequested,
    TurnEnded,
    TurnEndOutcome,
    UserMessage,
)
from jidocode.shared.events.rewind import REWIND_REFUSED, Rewind, Rewound

from .context import ContextBuilder, context_messages
from .evolve import evolve
from .intents import (
    CancelLlm,
    CancelPendingSubagents,
    CancelPendingTools,
    Emit,
    RunCompaction,
    RunLlm,
    RunToolIntent,
)
from .rewind import RewindRefusal, rewind_target
from .signal import Signal
from .state import Status
from .timeline import Timeline
from .work import Work, mint

__all__ = ["apply", "compaction_intent"]

_OVERFLOW = "llm_context_overflow"


@dataclass(frozen=True)
class _Before:
    """What was outstanding before the entry was applied."""

    llm: str | None
    tools: tuple[str, ...]
    subagents: tuple[str, ...]

    def answered_by(self, request_id: str) -> bool:
        return self.llm is not None and request_id == self.llm


def apply(w: Work, s: Signal) -> None:
    """Evolve with ``s``, emit it, and do what follows from it."""
    before = _Before(w.pending_llm, tuple(w.pending_tools), tuple(w.pending_subagents))
    evolve(w, s)
    w.intents.append(Emit(entry=s))
    event = s.event
    if isinstance(event, Cancel):
        _cancelled(w, s, event, before)
    elif w.status is not Status.CANCELLED or isinstance(event, Rewind):  # else nothing until resume
        _react(event, w, s, before)


def _cancelled(w: Work, s: Signal, event: Cancel, before: _Before) -> None:
    if before.llm is not None:
        w.intents.append(CancelLlm(request_id=before.llm))
    w.intents.append(CancelPendingTools(request_ids=before.tools, correlation_id=s.correlation_id))
    w.intents.append(CancelPendingSubagents(subagent_ids=before.subagents, correlation_id=s.correlation_id))
    _end_turn(w, s, "cancelled", error_type="cancelled", message=event.reason or "cancelled")


@singledispatch
def _react(event: EventModel, w: Work, s: Signal, before: _Before) -> None:
    """An entry that leads nowhere by itself."""


@_react.register
def _user_message(event: UserMessage, w: Work, s: Signal, before: _Before) -> None:
    if w.status is Status.IDLE:
        _request_llm(w, s)


@_react.register
def _resume(event: Resume, w: Work, s: Signal, before: _Before) -> None:
    if w.status is Status.IDLE and w.unanswered:
        _request_llm(w, s)  # a message received while cancelled is answered now (seed 002)


@_react.register
def _llm_requested(event: LlmRequested, w: Work, s: Signal, before: _Before) -> None:
    w.intents.append(
        RunLlm(
            request_id=s.id,
            correlation_id=s.correlation_id,
            messages=context_messages(w.timeline),
            turn=event.turn,
        )
    )


@_react.register
def _tool_requested(event: ToolCallRequested, w: Work, s: Signal, before: _Before) -> None:
    call = w.pending_tools[s.id]
    w.intents.append(
        RunToolIntent(
            request_id=s.id,
            call_id=call.call_id,
            name=call.name,
            args=call.args,
            correlation_id=s.correlation_id,
        )
    )


@_react.register
def _llm_completed(event: LlmCompleted, w: Work, s: Signal, before: _Before) -> None:
    if before.llm is None or event.request_id != before.llm:
        return  # a stale answer
    calls = event.calls()
    text = event.content
    if text or not calls:
        answer = mint(w, AssistantMessage(text=text, request_id=before.llm), s)
        apply(w, answer)
        if not calls:
            _end_turn(w, s, "completed", answer_id=answer.id, text=text)
    offered = event.offered_tools
    refused: list[tuple[Signal, ToolCallRequested]] = []
    for index, call in enumerate(calls):
        args = call.arguments
        requested = ToolCallRequested(
            call_id=str(call.id or f"call_{index}"),
            name=str(call.name or ""),
            args=args if isinstance(args, dict) else {"value": args},
            llm_request_id=before.llm,
        )
        entry = mint(w, requested, s)
        if offered is None or requested.name in offered:
            apply(w, entry)
        else:  # recorded (the model asked for it), never run
            evolve(w, entry)
            w.intents.append(Emit(entry=entry))
            refused.append((entry, requested))
    # after every call is pending, so the last answer (not the first) asks the model again
    for entry, requested in refused:
        apply(w, mint(w, _unknown_tool(entry.id, requested, list(offered or [])), entry))
    if not calls and w.unanswered:
        _request_llm(w, s)


@_react.register(ToolCallCompleted)
@_react.register(ToolCallFailed)
def _tool_answered(event: ToolCallCompleted | ToolCallFailed, w: Work, s: Signal, before: _Before) -> None:
    if event.request_id in before.tools and not w.pending_tools and w.status is Status.AWAITING_TOOLS:
        _request_llm(w, s)


@_react.register
def _llm_failed(event: LlmFailed, w: Work, s: Signal, before: _Before) -> None:
    if not before.answered_by(event.request_id):
        return
    overflow = event.error_type == _OVERFLOW and not w.overflow_compacted
    if overflow and _request_compaction(w, s, "overflow"):
        return  # then one retry (see _compaction_answered)
    _end_turn(
        w,
        s,
        "failed",
        error_type=event.error_type or "llm_error",
        message=event.message,
        retryable=event.retryable,
    )


@_react.register
def _loop_stopped(event: LoopStopped, w: Work, s: Signal, before: _Before) -> None:
    _end_turn(
        w,
        s,
        "stopped",
        error_type=event.reason or "stopped",
        message=f"the loop stopped ({event.reason}) after {event.turns} of {event.max_turns} turns",
    )


@_react.register
def _compact(event: Compact, w: Work, s: Signal, before: _Before) -> None:
    if w.status is not Status.IDLE or _request_compaction(w, s, "manual", event.instructions):
        return
    error = ConversationError(
        error_type="nothing_to_compact",
        message="nothing to compact: the context holds only the turns a compaction keeps "
        "(llm.compact_keep_turns) and an earlier summary",
        details={"compacted_to": w.compacted_to},
    )
    apply(w, mint(w, error, s))


@_react.register
def _rewind(event: Rewind, w: Work, s: Signal, before: _Before) -> None:
    """Answer a rewind input: a ``conversation.rewound`` entry, or why not (decision 0335)."""
    target = rewind_target(w.status, w.timeline, event.message_id)
    if isinstance(target, RewindRefusal):
        refused = ConversationError(
            error_type=REWIND_REFUSED,
            message=target.message,
            details={"request_id": s.id, "message_id": target.message_id, "reason": target.reason},
        )
        apply(w, mint(w, refused, s))
        return
    rewound = Rewound(
        request_id=s.id,
        message_id=target.message_id,
        text=target.text,
        to_index=target.position,
        kept=target.kept,
        dropped=target.dropped,
    )
    apply(w, mint(w, rewound, s))


@_react.register
def _compaction_requested(event: CompactionRequested, w: Work, s: Signal, before: _Before) -> None:
    w.intents.append(compaction_intent(s, w.timeline))


@_react.register(CompactionCompleted)
@_react.register(CompactionFailed)
def _compaction_answered(
    event: CompactionCompleted | CompactionFailed, w: Work, s: Signal, before: _Before
) -> None:
    if not before.answered_by(event.request_id):
        return
    if isinstance(event, CompactionFailed) and event.reason == "overflow":
        # the retry would overflow again: the turn ends with its failure
        _end_turn(
            w,
            s,
            "failed",
            error_type=_OVERFLOW,
            message="the context is over the model's window and its compaction failed: "
            f"{event.message or event.error_type}",
        )
        return
    if event.reason != "manual" or w.unanswered or w.turn_open:
        _request_llm(w, s, compact=False)


# -- the turn's end (decision 0317) ---------------------------------------------------


def _end_turn(
    w: Work,
    cause: Signal,
    outcome: TurnEndOutcome,
    *,
    error_type: str | None = None,
    message: str = "",
    retryable: bool = False,
    answer_id: str | None = None,
    text: str = "",
) -> None:
    """Apply the ``conversation.turn.ended`` entry of the open turn.

    A turn opens with the first model call after the conversation was idle. A turn that does
    not complete also ends the user messages still waiting for a model call (their senders
    would wait for nothing): with a cancel even when no turn is open. A completed turn leaves
    them to the next turn, which starts at once.
    """
    waiting = w.waiting_messages if outcome != "completed" else []
    if not w.turn_open and not (outcome == "cancelled" and waiting):
        return
    ended = TurnEnded(
        outcome=outcome,
        message_ids=[*w.turn_messages, *waiting],
        answer_id=answer_id,
        text=text,
        error_type=error_type,
        message=message,
        retryable=retryable,
        turns=w.turns,
        overflow_retried=w.turn_overflowed,
    )
    apply(w, mint(w, ended, cause))


# -- model calls and compaction (docs/compaction-and-replay.md) -----------------------


def _unknown_tool(request_id: str, requested: ToolCallRequested, offered: list[str]) -> ToolCallFailed:
    """The answer to a call of a tool the model was not offered: it never reaches the tool runner."""
    name = requested.name
    return ToolCallFailed(
        request_id=request_id,
        call_id=requested.call_id,
        name=name,
        error_type="unknown_tool",
        message=f"there is no tool {name!r} here; the tools offered are: {', '.join(offered) or 'none'}",
        details={"tool": name, "offered": offered},
    )


def _request_llm(w: Work, cause: Signal, *, compact: bool = True) -> None:
    limit = w.base.limits.max_turns
    if w.turns >= limit:
        apply(w, mint(w, LoopStopped(reason="max_turns", turns=w.turns, max_turns=limit), cause))
        return
    if compact and _wants_compaction(w):
        reason: CompactionReason = "manual" if w.compact_wanted else "threshold"
        if _request_compaction(w, cause, reason):
            return  # the model call follows the summary (see _compaction_answered)
    apply(w, mint(w, LlmRequested(turn=w.turns + 1), cause))


def _wants_compaction(w: Work) -> bool:
    """A compaction is asked for, or the last model call filled ``compact_at`` of its window."""
    at = w.base.limits.compact_at
    full = at > 0 and w.context_window > 0 and w.context_tokens >= at * w.context_window
    return w.compact_wanted or full


def _request_compaction(
    w: Work, cause: Signal, reason: CompactionReason, instructions: str | None = None
) -> bool:
    """Apply a ``compaction.requested`` entry when there is something to summarise; whether it was."""
    cut = w.timeline.fold(ContextBuilder).cut(w.base.limits.compact_keep_turns)
    if cut is None:
        w.compact_wanted = False
        return False
    to_index, messages = cut
    total = len(context_messages(w.timeline))
    requested = CompactionRequested(
        reason=reason,
        from_index=min(w.compacted_to, to_index - 1),
        to_index=to_index,
        messages=messages,
        kept=total - messages,
        context_tokens=w.context_tokens,
        context_window=w.context_window,
        instructions=instructions or None,
    )
    apply(w, mint(w, requested, cause))
    return True


def compaction_intent(requested: Signal, timeline: Timeline) -> RunCompaction:
    """The effect of a ``compaction.requested`` entry, ``timeline`` ending with it."""
    event = requested.event_as(CompactionRequested)
    context = context_messages(timeline)
    n = event.messages
    return RunCompaction(
        request_id=requested.id,
        correlation_id=requested.correlation_id,
        reason=event.reason,
        from_index=event.from_index,
        to_index=event.to_index,
        first_id=timeline[event.from_index].id,
        last_id=timeline[event.to_index - 1].id,
        messages=context[:n],
        kept=context[n:],
        context_tokens=event.context_tokens,
        instructions=event.instructions,
    )
