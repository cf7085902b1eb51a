"""Conversation events (seed 002): external input, internal runtime flow, lifecycle, commands.

Channels:

* **external** (``EXTERNAL_TYPES``): the only types accepted on a conversation's
  input subject, ``jido.conv.<p>.<c>.in`` — a user message, cancel, resume and
  the answer to an approval request.
* **internal** (channel ``conversation``): timeline entries the runtime itself
  produces (LLM and tool lifecycle, assistant messages and deltas, queue and
  loop events, errors). Every timeline entry is journaled and published on
  ``jido.evt.<p>.<c>.<type>``.
* **lifecycle** (channel ``signal``): ``conversation.started``, ``.stopped``,
  ``.event_ingested`` on ``jido.sig.<type>``.
* **commands** (channel ``command``): request bodies of the conversation
  service's endpoints and the project service's front door.
"""

from __future__ import annotations

from typing import Any, ClassVar, Final, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from jidocode.shared.forms import bounded_content

from ._base import Command, EventModel
from .model_answer import ModelToolCall, usage_cost, usage_count
from .rewind import EVENTS as _REWIND_EVENTS
from .rewind import REWIND_REFUSED, Rewind, RewindConversation, RewindResult, Rewound
from .turn import TurnEnded, TurnEndOutcome

__all__ = [
    "EVENTS",
    "EXTERNAL_TYPES",
    "PROJECTIONS",
    "REWIND_REFUSED",
    "ApprovalDecision",
    "ApprovalRequested",
    "ApprovalResponse",
    "AssistantDelta",
    "AssistantMessage",
    "Cancel",
    "Compact",
    "CompactionCompleted",
    "CompactionFailed",
    "CompactionRequested",
    "ConversationDeleted",
    "ConversationError",
    "ConversationInfo",
    "ConversationList",
    "ConversationStarted",
    "ConversationStopped",
    "ConversationSummary",
    "ConversationsPruned",
    "DeleteConversation",
    "EventAccepted",
    "EventIngested",
    "GetProjection",
    "ListConversations",
    "LlmCompleted",
    "LlmFailed",
    "LlmRequested",
    "LoopStopped",
    "ModelToolCall",
    "Projection",
    "PruneConversations",
    "QueueOverflow",
    "ReplayInfo",
    "Resume",
    "Rewind",
    "RewindConversation",
    "RewindResult",
    "Rewound",
    "SendEvent",
    "StartConversation",
    "StopConversation",
    "SubagentCompleted",
    "SubagentStarted",
    "Subscribe",
    "ToolCallCompleted",
    "ToolCallFailed",
    "ToolCallRequested",
    "TurnEndOutcome",
    "TurnEnded",
    "UserMessage",
    "usage_cost",
    "usage_count",
]

ApprovalDecision = Literal["approve_once", "approve_session", "deny"]

#: Projections readable through ``get_projection``.
PROJECTIONS: Final = (
    "timeline",
    "llm_context",
    "diagnostics",
    "subagent_status",
    "pending_tool_calls",
    "usage",
    "canonical_timeline",
    "canonical_llm_context",
)


class _Output(EventModel):
    channel: ClassVar[str] = "conversation"


# -- external input -----------------------------------------------------------


class UserMessage(_Output):
    type: Literal["conversation.user.message"] = "conversation.user.message"
    text: str


class Cancel(_Output):
    type: Literal["conversation.cancel"] = "conversation.cancel"
    reason: str | None = None


class Resume(_Output):
    type: Literal["conversation.resume"] = "conversation.resume"


class ApprovalResponse(_Output):
    """A client's answer to :class:`ApprovalRequested` (consumed by the tool runner)."""

    type: Literal["conversation.approval.response"] = "conversation.approval.response"
    request_id: str
    decision: ApprovalDecision
    #: The values a question's form asks for (an approve only; ``shared/forms.py``), bounded.
    content: dict[str, Any] | None = None

    _bounded = field_validator("content")(bounded_content)


class Compact(_Output):
    """Compact the context now (``/compact``): the older part is summarised by the model.

    While a turn runs, the compaction happens before its next model call.
    """

    type: Literal["conversation.compact"] = "conversation.compact"
    #: What the summary should keep in particular (``/compact keep the API decisions``).
    instructions: str | None = Field(default=None, max_length=4000)


#: The only types accepted from outside on ``jido.conv.<p>.<c>.in``.
EXTERNAL_TYPES: Final[frozenset[str]] = frozenset(
    model.TYPE for model in (UserMessage, Cancel, Resume, ApprovalResponse, Compact, Rewind)
)


# -- internal runtime flow ----------------------------------------------------


class LlmRequested(_Output):
    """The reducer asked for a model call; the entry id is the request id."""

    type: Literal["conversation.llm.requested"] = "conversation.llm.requested"
    turn: int = Field(ge=1)


class LlmCompleted(_Output):
    type: Literal["conversation.llm.completed"] = "conversation.llm.completed"
    request_id: str
    content: str = ""
    #: ``[{"id", "name", "arguments"}]`` as the model returned them.
    tool_calls: list[dict[str, Any]] = Field(default_factory=list)
    #: ``prompt_tokens``, ``completion_tokens``, ``cached_tokens``, ``total_tokens``, ``cost_usd``.
    usage: dict[str, Any] = Field(default_factory=dict)
    model: str = ""
    finish_reason: str | None = None
    #: The names of the tools the model was offered in this request. A tool call naming
    #: any other is answered ``unknown_tool`` and never reaches the tool runner;
    #: ``None`` (an entry from before this field) checks nothing.
    offered_tools: list[str] | None = None
    #: The model's context window in tokens when it answered (0: unknown); with ``usage`` it
    #: tells the reducer when to compact (``llm.compact_at``).
    context_window: int = Field(default=0, ge=0)

    def calls(self) -> list[ModelToolCall]:
        """:attr:`tool_calls` as typed calls (an entry that is no object reads as an empty call)."""
        return [
            ModelToolCall.model_validate(call) if isinstance(call, dict) else ModelToolCall()
            for call in self.tool_calls
        ]

    def context_fill(self) -> int:
        """The context this call filled: its prompt plus completion tokens (from ``usage``)."""
        return usage_count(self.usage, "prompt_tokens") + usage_count(self.usage, "completion_tokens")


class LlmFailed(_Output):
    type: Literal["conversation.llm.failed"] = "conversation.llm.failed"
    request_id: str
    error_type: str
    message: str
    retryable: bool = False


class ToolCallRequested(_Output):
    """One tool call of an LLM turn; the entry id is the tool runner's request id."""

    type: Literal["conversation.tool.requested"] = "conversation.tool.requested"
    call_id: str
    name: str
    args: dict[str, Any] = Field(default_factory=dict)
    llm_request_id: str


class ToolCallCompleted(_Output):
    type: Literal["conversation.tool.completed"] = "conversation.tool.completed"
    request_id: str
    call_id: str
    name: str
    data: Any = None
    artifacts: list[Any] = Field(default_factory=list)
    logs: list[str] = Field(default_factory=list)


class ToolCallFailed(_Output):
    type: Literal["conversation.tool.failed"] = "conversation.tool.failed"
    request_id: str
    call_id: str
    name: str
    error_type: str
    message: str
    details: dict[str, Any] = Field(default_factory=dict)


class AssistantMessage(_Output):
    type: Literal["conversation.assistant.message"] = "conversation.assistant.message"
    text: str
    request_id: str


class AssistantDelta(_Output):
    """A piece of streamed assistant text; published live, never journaled."""

    type: Literal["conversation.assistant.delta"] = "conversation.assistant.delta"
    text: str
    request_id: str | None = None


class QueueOverflow(_Output):
    """The queue was full: the NEW signal named here was dropped (nothing accepted is lost)."""

    type: Literal["conversation.queue.overflow"] = "conversation.queue.overflow"
    dropped_id: str
    dropped_type: str
    queue_size: int
    max_queue: int


class ConversationError(_Output):
    """Something went wrong that the conversation survived (e.g. rejected input)."""

    type: Literal["conversation.error"] = "conversation.error"
    error_type: str
    message: str
    details: dict[str, Any] = Field(default_factory=dict)


class LoopStopped(_Output):
    """The LLM/tool loop stopped without an answer (``reason``: ``max_turns``)."""

    type: Literal["conversation.loop.stopped"] = "conversation.loop.stopped"
    reason: str
    turns: int
    max_turns: int


class ApprovalRequested(_Output):
    """An ``ask`` permission: the tool runner waits for an :class:`ApprovalResponse`."""

    type: Literal["conversation.approval.requested"] = "conversation.approval.requested"
    request_id: str
    tool: str
    args: dict[str, Any] = Field(default_factory=dict)
    reason: str = ""
    #: A form the answer fills (an MCP elicitation's ``requestedSchema``; ``shared/forms.py``):
    #: the server's text, untrusted.
    form: dict[str, Any] | None = None


class SubagentStarted(_Output):
    type: Literal["conversation.subagent.started"] = "conversation.subagent.started"
    subagent_id: str
    name: str = ""
    #: The parent's ``task`` tool call that started it (the child's id derives from it).
    request_id: str = ""
    #: The ``task`` call's short description.
    description: str = ""


class SubagentCompleted(_Output):
    type: Literal["conversation.subagent.completed"] = "conversation.subagent.completed"
    subagent_id: str
    status: str = "completed"
    result: Any = None


# -- lifecycle signals (jido.sig.*) -------------------------------------------


class ConversationStarted(EventModel):
    type: Literal["conversation.started"] = "conversation.started"
    project_id: str
    conversation_id: str
    instance: str = ""


class ConversationStopped(EventModel):
    type: Literal["conversation.stopped"] = "conversation.stopped"
    project_id: str
    conversation_id: str
    reason: str = ""


class EventIngested(EventModel):
    type: Literal["conversation.event_ingested"] = "conversation.event_ingested"
    project_id: str
    conversation_id: str
    event_id: str
    event_type: str


# -- replies ------------------------------------------------------------------


class ConversationInfo(EventModel):
    """Reply of ``start`` and ``stop``: the conversation's record."""

    channel: ClassVar[str] = "reply"
    type: Literal["conversation.info"] = "conversation.info"
    project_id: str
    conversation_id: str
    #: ``active`` or ``stopped``.
    status: str = "active"
    #: The effective settings: the project's ``llm`` settings overridden by the start request's.
    settings: dict[str, Any] = Field(default_factory=dict)
    created_at: str = ""
    updated_at: str = ""
    #: True when ``start`` found the conversation already there (its history is kept).
    reopened: bool = False


class ConversationDeleted(EventModel):
    """Reply of ``delete``: what was removed of the conversation (counts of stored messages)."""

    channel: ClassVar[str] = "reply"
    type: Literal["conversation.deleted"] = "conversation.deleted"
    project_id: str
    conversation_id: str
    journal_entries: int = 0
    events: int = 0
    inputs: int = 0


class ConversationsPruned(EventModel):
    """Reply of ``prune``: the conversations deleted (or, on a dry run, that would be)."""

    channel: ClassVar[str] = "reply"
    type: Literal["conversation.pruned"] = "conversation.pruned"
    project_id: str
    older_than_days: float
    dry_run: bool = False
    conversation_ids: list[str] = Field(default_factory=list)
    #: Tombstones of conversations deleted long enough ago dropped from the records.
    tombstones: int = 0


class ConversationSummary(BaseModel):
    """One conversation of ``list``: its record, who runs it, and when it last did something."""

    model_config = ConfigDict(frozen=True)

    conversation_id: str
    #: ``active`` or ``stopped``.
    status: str
    #: The replica running it (its bus source); ``None`` when nobody has it loaded (idle, stopped).
    owner: str | None = None
    created_at: str = ""
    updated_at: str = ""
    #: Time of its latest journal entry (``None``: nothing journaled yet).
    last_activity: str | None = None
    #: Its first user message, on one line and cut ("" until one is sent).
    title: str = ""


class ConversationList(EventModel):
    """Reply of ``list``: the project's conversations (deleted ones excluded), newest first."""

    channel: ClassVar[str] = "reply"
    type: Literal["conversation.list"] = "conversation.list"
    project_id: str
    conversations: list[ConversationSummary] = Field(default_factory=list)
    #: More conversations exist than the request's ``limit``.
    truncated: bool = False


class EventAccepted(EventModel):
    """Reply of ``send_event``: the event is stored on the conversation's input stream."""

    channel: ClassVar[str] = "reply"
    type: Literal["conversation.event_accepted"] = "conversation.event_accepted"
    #: The event id: every output entry caused by it carries it as ``causationid``.
    id: str
    #: The correlation id every output of this input carries (the request's, or the event id).
    correlation_id: str
    #: Sequence of the event in the ``JIDO_CONV_IN`` stream.
    sequence: int


class Projection(EventModel):
    """Reply of ``get_projection``: ``value`` is the projection named ``name``."""

    channel: ClassVar[str] = "reply"
    type: Literal["conversation.projection"] = "conversation.projection"
    conversation_id: str
    name: str
    value: Any = None


# -- commands (request bodies) ------------------------------------------------


class StartConversation(Command[ConversationInfo]):
    """Start (or reopen) a conversation; ``conversation_id`` is minted when absent.

    ``settings`` may hold ``max_turns``, ``model`` and other LLM settings; they
    override the project's ``llm`` settings (settings.json and environment).
    """

    type: Literal["conversation.cmd.start"] = "conversation.cmd.start"
    conversation_id: str | None = None
    settings: dict[str, Any] = Field(default_factory=dict)


class StopConversation(Command[ConversationInfo]):
    type: Literal["conversation.cmd.stop"] = "conversation.cmd.stop"
    conversation_id: str
    reason: str = ""


class ListConversations(Command[ConversationList]):
    """The project's conversations: status, owner replica, last activity (``show`` adds turns and
    tokens from a conversation's projections)."""

    type: Literal["conversation.cmd.list"] = "conversation.cmd.list"
    #: At most this many, newest first (a reply of 2,000 stays well within the bus payload limit).
    limit: int = Field(default=500, ge=1, le=2000)
    #: Only this conversation (``show``): its summary, or an empty list when it is unknown.
    conversation_id: str | None = None


class DeleteConversation(Command[ConversationDeleted]):
    """Delete a conversation for good: stop it, then remove its journal, its stored output and
    input, and its records. The journal has no age limit (decision 0033): this is how a
    conversation's record leaves the disk. Its token usage stays in the ledger."""

    type: Literal["conversation.cmd.delete"] = "conversation.cmd.delete"
    conversation_id: str


class PruneConversations(Command[ConversationsPruned]):
    """Delete, as ``delete`` does and with their token ledger, the conversations no replica runs
    whose last activity is older than ``older_than_days`` (decision 0325)."""

    type: Literal["conversation.cmd.prune"] = "conversation.cmd.prune"
    older_than_days: float = Field(ge=0.0, le=36500.0)
    dry_run: bool = False


class SendEvent(Command[EventAccepted]):
    """Validate one external event and store it on the conversation's input stream."""

    type: Literal["conversation.cmd.send_event"] = "conversation.cmd.send_event"
    conversation_id: str
    event_type: str
    data: dict[str, Any] = Field(default_factory=dict)
    id: str | None = None
    correlation_id: str | None = None


class GetProjection(Command[Projection]):
    type: Literal["conversation.cmd.get_projection"] = "conversation.cmd.get_projection"
    conversation_id: str
    name: str = "timeline"


class ReplayInfo(EventModel):
    """Reply of ``subscribe``/``replay``: live subject, stream, and the sequence to start from."""

    channel: ClassVar[str] = "reply"
    type: Literal["conversation.replay_info"] = "conversation.replay_info"
    project_id: str
    conversation_id: str
    subject: str
    stream: str
    #: First stream sequence to deliver (1 when replaying everything).
    start_sequence: int
    #: Sequence of ``after_id`` in the stream, if it was found.
    after_sequence: int | None = None


class Subscribe(Command[ReplayInfo]):
    """Where to follow a conversation, and how to replay from ``after_id``."""

    type: Literal["conversation.cmd.subscribe"] = "conversation.cmd.subscribe"
    conversation_id: str
    after_id: str | None = None


#: The catalogue's conversation types, in a fixed order (the AsyncAPI document follows it).
EVENTS: tuple[type[EventModel], ...] = (
    *(UserMessage, Cancel, Resume, ApprovalResponse),
    *(LlmRequested, LlmCompleted, LlmFailed, ToolCallRequested, ToolCallCompleted, ToolCallFailed),
    *(AssistantMessage, AssistantDelta, QueueOverflow, ConversationError, LoopStopped, ApprovalRequested),
    *(SubagentStarted, SubagentCompleted, ConversationStarted, ConversationStopped, EventIngested),
    *(StartConversation, StopConversation, DeleteConversation, PruneConversations, ListConversations),
    *(SendEvent, GetProjection, Subscribe, ReplayInfo, ConversationInfo, ConversationDeleted),
    *(ConversationsPruned, ConversationList, EventAccepted, Projection),
)


# -- compaction (docs/compaction-and-replay.md) --------------------------------

CompactionReason = Literal["threshold", "overflow", "manual"]


class CompactionRequested(_Output):
    """The reducer asked for a summary of the older part of the context; the entry id is the request id.

    What is summarised: the ``llm_context`` messages of the timeline entries before position
    ``to_index`` (the first ``messages`` messages of the context at this entry, an earlier
    summary included); the ``kept`` messages after them stay as they are.
    """

    type: Literal["conversation.compaction.requested"] = "conversation.compaction.requested"
    reason: CompactionReason
    #: Timeline positions ``[from_index, to_index)`` newly summarised (``from_index``: where the
    #: previous compaction stopped, 0 for the first).
    from_index: int = Field(ge=0)
    to_index: int = Field(ge=1)
    #: Context messages summarised and kept.
    messages: int = Field(ge=1)
    kept: int = Field(ge=0)
    #: Context fill the last model call reported (prompt + completion tokens), 0 when unknown.
    context_tokens: int = Field(default=0, ge=0)
    context_window: int = Field(default=0, ge=0)
    instructions: str | None = None


class CompactionCompleted(_Output):
    """The summary came back: from here the ``llm_context`` is the summary plus the kept messages."""

    type: Literal["conversation.compaction.completed"] = "conversation.compaction.completed"
    request_id: str
    reason: CompactionReason
    summary: str
    from_index: int = Field(ge=0)
    to_index: int = Field(ge=1)
    #: Ids of the first and last timeline entries newly summarised.
    first_id: str
    last_id: str
    messages: int = Field(ge=1)
    #: The context's size before and after, in tokens (the last call's count, scaled by the
    #: estimated share of what was replaced; see ``services/conversation/compaction.py``).
    tokens_before: int = Field(ge=0)
    tokens_after: int = Field(ge=0)
    model: str = ""
    #: The summary call's own usage (``prompt_tokens``, ``completion_tokens``, ``total_tokens``, ``cost_usd``).
    usage: dict[str, Any] = Field(default_factory=dict)
    duration_ms: int = Field(default=0, ge=0)


class CompactionFailed(_Output):
    """The summary call failed: the context stays as it was."""

    type: Literal["conversation.compaction.failed"] = "conversation.compaction.failed"
    request_id: str
    reason: CompactionReason
    error_type: str
    message: str


EVENTS = (*EVENTS, Compact, CompactionRequested, CompactionCompleted, CompactionFailed, TurnEnded)
EVENTS = (*EVENTS, *_REWIND_EVENTS)
