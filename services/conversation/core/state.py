"""Conversation state and its lifecycle: a frozen model and an explicit transition table."""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from .signal import Signal
from .timeline import Timeline

__all__ = [
    "TRANSITIONS",
    "ConversationState",
    "Limits",
    "PendingToolCall",
    "Status",
    "SubagentInfo",
    "Trigger",
    "initial_state",
    "next_status",
]


class Status(StrEnum):
    IDLE = "idle"
    AWAITING_LLM = "awaiting_llm"
    AWAITING_TOOLS = "awaiting_tools"
    CANCELLED = "cancelled"

    @property
    def running(self) -> bool:
        return self in (Status.AWAITING_LLM, Status.AWAITING_TOOLS)


class Trigger(StrEnum):
    LLM_REQUESTED = "llm_requested"
    LLM_ANSWERED = "llm_answered"
    LLM_ANSWERED_WITH_TOOLS = "llm_answered_with_tools"
    LLM_FAILED = "llm_failed"
    LOOP_STOPPED = "loop_stopped"
    CANCEL = "cancel"
    RESUME = "resume"


#: (status, trigger) -> next status. A pair missing here leaves the status as it is.
TRANSITIONS: Mapping[tuple[Status, Trigger], Status] = {
    (Status.IDLE, Trigger.LLM_REQUESTED): Status.AWAITING_LLM,
    (Status.AWAITING_TOOLS, Trigger.LLM_REQUESTED): Status.AWAITING_LLM,
    (Status.AWAITING_LLM, Trigger.LLM_ANSWERED): Status.IDLE,
    (Status.AWAITING_LLM, Trigger.LLM_ANSWERED_WITH_TOOLS): Status.AWAITING_TOOLS,
    (Status.AWAITING_LLM, Trigger.LLM_FAILED): Status.IDLE,
    (Status.AWAITING_TOOLS, Trigger.LOOP_STOPPED): Status.IDLE,
    (Status.IDLE, Trigger.LOOP_STOPPED): Status.IDLE,
    (Status.IDLE, Trigger.CANCEL): Status.CANCELLED,
    (Status.AWAITING_LLM, Trigger.CANCEL): Status.CANCELLED,
    (Status.AWAITING_TOOLS, Trigger.CANCEL): Status.CANCELLED,
    (Status.CANCELLED, Trigger.CANCEL): Status.CANCELLED,
    (Status.CANCELLED, Trigger.RESUME): Status.IDLE,
}


def next_status(status: Status, trigger: Trigger) -> Status | None:
    """The status after ``trigger``, or ``None`` when the table has no such transition."""
    return TRANSITIONS.get((status, trigger))


class Limits(BaseModel):
    """Bounds of one conversation, validated at construction."""

    model_config = ConfigDict(frozen=True)

    #: Signals waiting to be applied; a signal arriving at a full queue is dropped.
    max_queue: int = Field(default=256, ge=1)
    #: Signals applied by one ``drain`` call before it yields ``continue_drain``.
    max_drain_steps: int = Field(default=64, ge=1)
    #: LLM calls after one user message before the loop stops.
    max_turns: int = Field(default=20, ge=1)
    #: Compact the context before a model call once the last call filled this share of the
    #: model's window (``llm.compact_at``; 0 never compacts on its own).
    compact_at: float = Field(default=0.8, ge=0.0, le=1.0)
    #: User turns a compaction keeps as they are (``llm.compact_keep_turns``).
    compact_keep_turns: int = Field(default=2, ge=1, le=100)


class PendingToolCall(BaseModel):
    model_config = ConfigDict(frozen=True)

    request_id: str
    call_id: str
    name: str
    args: dict[str, Any]
    llm_request_id: str
    correlation_id: str


class SubagentInfo(BaseModel):
    model_config = ConfigDict(frozen=True)

    subagent_id: str
    name: str = ""
    status: str = "running"
    result: Any = None
    request_id: str = ""
    description: str = ""


class ConversationState(BaseModel):
    """Everything the reducer knows about one conversation. Never mutated: each step returns a new one.

    The timeline is shared with the states before it (see ``timeline.py``):
    a step appends without copying it. An accepted signal is either queued or
    applied, so the dedup index of ``(signal.id, correlation_id)`` is the
    timeline's key index plus the (bounded) queue. ``version`` is the timeline
    length, the key of projection caches.
    """

    model_config = ConfigDict(frozen=True)

    project_id: str
    conversation_id: str
    limits: Limits = Field(default_factory=Limits)
    status: Status = Status.IDLE
    timeline: Timeline = Field(default_factory=Timeline)
    event_queue: tuple[Signal, ...] = ()
    queue_size: int = 0
    pending_llm: str | None = None
    pending_tool_calls: tuple[PendingToolCall, ...] = ()
    pending_subagents: tuple[str, ...] = ()
    subagents: Mapping[str, SubagentInfo] = Field(default_factory=dict)
    #: LLM calls since the last user message.
    turns: int = 0
    #: A user message arrived that no LLM call has seen yet.
    unanswered: bool = False
    #: Counter of ids the core mints for the entries it generates.
    next_seq: int = 1
    #: Context fill reported by the last model call (prompt + completion tokens) and the
    #: model's window then (0: unknown); after a compaction, its ``tokens_after``.
    context_tokens: int = 0
    context_window: int = 0
    #: A ``conversation.compact`` arrived during a turn: compact before the next model call.
    compact_wanted: bool = False
    #: This turn's ``llm_context_overflow`` already had its compaction (one retry only).
    overflow_compacted: bool = False
    #: Timeline position up to which the context is summarised (the last compaction's ``to_index``).
    compacted_to: int = 0
    #: A turn is open (decision 0317): from the first model call after idle to its ``turn.ended``.
    turn_open: bool = False
    #: The user messages the open turn's model calls answer.
    turn_messages: tuple[str, ...] = ()
    #: User messages no model call has seen yet (they join the next call's turn).
    waiting_messages: tuple[str, ...] = ()
    #: The open turn's context overflowed and was compacted for a retry.
    turn_overflowed: bool = False

    @property
    def version(self) -> int:
        return len(self.timeline)

    def is_seen(self, signal: Signal) -> bool:
        """Whether a signal with ``signal``'s ``(id, correlation_id)`` was accepted (applied or queued)."""
        if self.timeline.has((signal.id, signal.correlation_id)):
            return True
        return any(q.id == signal.id and q.correlation_id == signal.correlation_id for q in self.event_queue)


def initial_state(project_id: str, conversation_id: str, limits: Limits | None = None) -> ConversationState:
    return ConversationState(
        project_id=project_id, conversation_id=conversation_id, limits=limits or Limits()
    )
