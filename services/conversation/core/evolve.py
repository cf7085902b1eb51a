"""Evolve: the only place a conversation's state changes, a function of the applied entry alone.

Replay of a journal runs only this, live processing runs it and then ``react.py``; so
``replay(journal) == live state``. Dispatch is on the entry's typed event (the catalogue's
model, decoded once at the edge): one small function per event type, the way h11's
``_state.py`` dispatches on event classes. An event type without one only joins the timeline.
"""

from __future__ import annotations

from functools import singledispatch

from jidocode.shared.events import EventModel
from jidocode.shared.events.conversation import (
    Cancel,
    Compact,
    CompactionCompleted,
    CompactionFailed,
    CompactionRequested,
    LlmCompleted,
    LlmFailed,
    LlmRequested,
    LoopStopped,
    Resume,
    SubagentCompleted,
    SubagentStarted,
    ToolCallCompleted,
    ToolCallFailed,
    ToolCallRequested,
    TurnEnded,
    UserMessage,
)
from jidocode.shared.events.rewind import Rewound

from .signal import Signal
from .state import PendingToolCall, Status, SubagentInfo, Trigger
from .work import CORE_SOURCE, Work, close_turn, transition

__all__ = ["evolve"]


def evolve(w: Work, s: Signal) -> None:
    """Append ``s`` to the timeline and change the state as its event says."""
    w.timeline = w.timeline.append(s)
    if s.source == CORE_SOURCE:
        w.next_seq += 1
    _evolve(s.event, w, s)


@singledispatch
def _evolve(event: EventModel, w: Work, s: Signal) -> None:
    """An entry that changes nothing but the timeline (an assistant message, an error …)."""


@_evolve.register
def _user_message(event: UserMessage, w: Work, s: Signal) -> None:
    if w.status is Status.IDLE:
        close_turn(w)  # a journal from before 0317: its turns ended without an entry
    w.unanswered = True
    w.turns = 0
    w.overflow_compacted = False
    w.waiting_messages.append(s.id)


@_evolve.register
def _llm_requested(event: LlmRequested, w: Work, s: Signal) -> None:
    transition(w, Trigger.LLM_REQUESTED)
    w.pending_llm = s.id
    w.turns += 1
    w.unanswered = False
    w.turn_open = True
    w.turn_messages.extend(w.waiting_messages)  # the call answers them: they join the turn
    w.waiting_messages.clear()


@_evolve.register
def _turn_ended(event: TurnEnded, w: Work, s: Signal) -> None:
    close_turn(w)
    ended = set(event.message_ids)
    w.waiting_messages = [m for m in w.waiting_messages if m not in ended]


def _answers_pending(w: Work, request_id: str) -> bool:
    return w.pending_llm is not None and request_id == w.pending_llm


@_evolve.register
def _llm_completed(event: LlmCompleted, w: Work, s: Signal) -> None:
    if _answers_pending(w, event.request_id):
        w.pending_llm = None
        transition(w, Trigger.LLM_ANSWERED_WITH_TOOLS if event.tool_calls else Trigger.LLM_ANSWERED)
        w.context_tokens = event.context_fill()
        w.context_window = event.context_window
        w.overflow_compacted = False


@_evolve.register
def _llm_failed(event: LlmFailed, w: Work, s: Signal) -> None:
    if _answers_pending(w, event.request_id):
        w.pending_llm = None
        transition(w, Trigger.LLM_FAILED)


@_evolve.register
def _tool_requested(event: ToolCallRequested, w: Work, s: Signal) -> None:
    w.pending_tools[s.id] = PendingToolCall(
        request_id=s.id,
        call_id=event.call_id,
        name=event.name,
        args=dict(event.args),
        llm_request_id=event.llm_request_id,
        correlation_id=s.correlation_id,
    )


@_evolve.register(ToolCallCompleted)
@_evolve.register(ToolCallFailed)
def _tool_answered(event: ToolCallCompleted | ToolCallFailed, w: Work, s: Signal) -> None:
    w.pending_tools.pop(event.request_id, None)


@_evolve.register
def _loop_stopped(event: LoopStopped, w: Work, s: Signal) -> None:
    transition(w, Trigger.LOOP_STOPPED)


@_evolve.register
def _cancel(event: Cancel, w: Work, s: Signal) -> None:
    transition(w, Trigger.CANCEL)
    w.pending_llm = None
    w.pending_tools.clear()
    for sid in w.pending_subagents:
        w.set_subagent(w.subagents[sid].model_copy(update={"status": "cancelled"}))
    w.pending_subagents.clear()


@_evolve.register
def _resume(event: Resume, w: Work, s: Signal) -> None:
    if w.status is Status.CANCELLED:
        close_turn(w)  # ended by the cancel (before 0317: without an entry)
    transition(w, Trigger.RESUME)


@_evolve.register
def _compact(event: Compact, w: Work, s: Signal) -> None:
    if w.status.running:
        w.compact_wanted = True  # compacted before the turn's next model call


@_evolve.register
def _compaction_requested(event: CompactionRequested, w: Work, s: Signal) -> None:
    transition(w, Trigger.LLM_REQUESTED)
    w.pending_llm = s.id
    w.compact_wanted = False
    if event.reason == "overflow":
        w.overflow_compacted = True
        w.turn_overflowed = w.turn_open


@_evolve.register
def _compaction_completed(event: CompactionCompleted, w: Work, s: Signal) -> None:
    if _answers_pending(w, event.request_id):
        w.pending_llm = None
        transition(w, Trigger.LLM_ANSWERED)
        w.context_tokens = event.tokens_after
        w.compacted_to = event.to_index


@_evolve.register
def _compaction_failed(event: CompactionFailed, w: Work, s: Signal) -> None:
    if _answers_pending(w, event.request_id):
        w.pending_llm = None
        transition(w, Trigger.LLM_FAILED)


@_evolve.register
def _subagent_started(event: SubagentStarted, w: Work, s: Signal) -> None:
    sid = event.subagent_id
    w.set_subagent(
        SubagentInfo(
            subagent_id=sid,
            name=event.name,
            request_id=event.request_id,
            description=event.description,
            # started just before the parent's cancel reached its runner: cancelled with it
            status="cancelled" if w.status is Status.CANCELLED else "running",
        )
    )
    if sid not in w.pending_subagents and w.status is not Status.CANCELLED:
        w.pending_subagents.append(sid)


@_evolve.register
def _subagent_completed(event: SubagentCompleted, w: Work, s: Signal) -> None:
    sid = event.subagent_id
    info = w.subagents.get(sid) or SubagentInfo(subagent_id=sid)
    w.set_subagent(info.model_copy(update={"status": event.status or "completed", "result": event.result}))
    if sid in w.pending_subagents:
        w.pending_subagents.remove(sid)


@_evolve.register
def _rewound(event: Rewound, w: Work, s: Signal) -> None:
    """Back before a user message (the context moves in ``context.py``): the messages from it on
    are no longer waiting for an answer, and the last call's context fill says nothing now."""
    later = {e.id for e in w.timeline[event.to_index :] if e.type == UserMessage.TYPE}
    w.waiting_messages = [m for m in w.waiting_messages if m not in later]
    w.unanswered = bool(w.waiting_messages)
    w.turns = 0
    w.context_tokens = 0
