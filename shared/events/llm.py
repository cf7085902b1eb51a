"""LLM events: calls, visible retries and the token ledger (seed 003 ``TokenLedger``).

Published on ``subjects.signal(<type>)`` (``jido.sig.llm.…``) by the litellm
adapter of the conversation service. One model call (one ``LlmPort.complete``,
its retries included) is, in order: ``llm.started``, any ``llm.retrying``,
``llm.delta`` (the streamed text, coalesced: see :class:`LlmCallDelta`), then
exactly one of ``llm.completed`` or ``llm.failed``. Every one of them carries the
call's ``call_id`` (seed 000 §6 telemetry).

``llm.completed`` is also the ledger's one input: every completed call, with its
tokens and its cost where litellm knows the price (decision 0350: it replaced a
separate ``llm.usage`` signal that repeated them). ``llm.usage.totals`` is the shape
of the ledger's sums for a project or one conversation (stored in the
``jido_llm_ledger`` KV bucket, not published).
"""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field

from ._base import EventModel

__all__ = [
    "EVENTS",
    "LlmBudgetExceeded",
    "LlmCallCompleted",
    "LlmCallDelta",
    "LlmCallFailed",
    "LlmCallStarted",
    "LlmRetrying",
    "UsageTotals",
]


class LlmRetrying(EventModel):
    """A call failed transiently (rate limit, 5xx, timeout) and is retried after ``delay_s``."""

    type: Literal["llm.retrying"] = "llm.retrying"
    project_id: str
    conversation_id: str
    correlation_id: str | None = None
    model: str
    #: The call (see :class:`LlmCallStarted`); ``None`` from senders older than it.
    call_id: str | None = None
    #: 1-based number of the retry about to happen.
    attempt: int = Field(ge=1)
    max_retries: int = Field(ge=0)
    delay_s: float = Field(ge=0.0)
    error_type: str
    message: str


class LlmCallFailed(EventModel):
    """A call failed for good (after retries, or at once for a non-transient error)."""

    type: Literal["llm.failed"] = "llm.failed"
    project_id: str
    conversation_id: str
    correlation_id: str | None = None
    model: str | None = None
    error_type: str
    message: str
    attempts: int = Field(default=1, ge=1)
    #: The call (see :class:`LlmCallStarted`); ``None`` from senders older than it.
    call_id: str | None = None
    #: The conversation's id of the call (its ``conversation.llm.requested`` entry).
    request_id: str | None = None


class LlmBudgetExceeded(EventModel):
    """A conversation used up its token or cost budget; its LLM loop stops."""

    type: Literal["llm.budget.exceeded"] = "llm.budget.exceeded"
    project_id: str
    conversation_id: str
    used_tokens: int = Field(ge=0)
    budget_tokens: int | None = None
    used_usd: float = Field(default=0.0, ge=0.0)
    budget_usd: float | None = None


class LlmCallStarted(EventModel):
    """A model call begins (seed 000 §6 ``llm.started``), once per call whatever its retries.

    A call refused before it began (no model configured, a missing key, a used-up
    budget) has no ``llm.started``: only its ``llm.failed`` (or ``llm.budget.exceeded``).
    """

    type: Literal["llm.started"] = "llm.started"
    project_id: str
    conversation_id: str
    correlation_id: str | None = None
    #: Minted by the adapter for this call; every llm.* signal of the call carries it.
    call_id: str
    #: The conversation's id of this LLM request (``conversation.llm.requested``), when the
    #: request carries one.
    request_id: str | None = None
    model: str
    #: Messages sent (the system prompt included) and tools shown to the model.
    messages: int = Field(default=0, ge=0)
    tools: int = Field(default=0, ge=0)


class LlmCallDelta(EventModel):
    """Streamed text of a call (seed 000 §6 ``llm.delta``), coalesced to bound the signal rate.

    The adapter publishes the text it has gathered when a piece arrives at least
    ``delta_interval_s`` after its last ``llm.delta`` (the first piece goes out at
    once), in slices of at most ``delta_max_chars`` characters when that much has
    gathered, and the rest before the call's ``llm.completed``/``llm.failed``. So a
    call of ``n`` characters over ``t`` seconds gives at most
    ``n // delta_max_chars + t // delta_interval_s + 2`` deltas, and their ``text`` in
    ``seq`` order is exactly the streamed text. Live text for a conversation's own
    view stays on ``jido.evt.<p>.<c>.conversation.assistant.delta`` (every piece).
    """

    type: Literal["llm.delta"] = "llm.delta"
    project_id: str
    conversation_id: str
    correlation_id: str | None = None
    call_id: str
    request_id: str | None = None
    #: 0-based position of this delta in its call (a gap means one was lost).
    seq: int = Field(ge=0)
    text: str


class LlmCallCompleted(EventModel):
    """A call answered (seed 000 §6 ``llm.completed``): its usage, cost and duration.

    The ledger's input (its tokens and cost are added to the conversation's totals);
    ``deltas`` says how many ``llm.delta`` came before it.
    """

    type: Literal["llm.completed"] = "llm.completed"
    project_id: str
    conversation_id: str
    correlation_id: str | None = None
    call_id: str
    request_id: str | None = None
    model: str
    finish_reason: str | None = None
    prompt_tokens: int = Field(default=0, ge=0)
    completion_tokens: int = Field(default=0, ge=0)
    cached_tokens: int = Field(default=0, ge=0)
    total_tokens: int = Field(default=0, ge=0)
    #: ``None`` when litellm does not know the model's price.
    cost_usd: float | None = Field(default=None, ge=0.0)
    #: From the start of the call to its answer, retries and their waits included.
    duration_ms: float = Field(default=0.0, ge=0.0)
    retries: int = Field(default=0, ge=0)
    #: Characters of the answer's text, and its tool calls.
    content_chars: int = Field(default=0, ge=0)
    tool_calls: int = Field(default=0, ge=0)
    deltas: int = Field(default=0, ge=0)
    #: The model's context window (litellm's model map, else a default).
    context_window: int = Field(default=0, ge=0)


class UsageTotals(EventModel):
    """Summed usage of a conversation or a project (the ledger's value, the shape of a ``usage`` projection)."""

    channel: ClassVar[str] = "reply"
    type: Literal["llm.usage.totals"] = "llm.usage.totals"
    project_id: str = ""
    conversation_id: str | None = None
    calls: int = Field(default=0, ge=0)
    prompt_tokens: int = Field(default=0, ge=0)
    completion_tokens: int = Field(default=0, ge=0)
    cached_tokens: int = Field(default=0, ge=0)
    total_tokens: int = Field(default=0, ge=0)
    cost_usd: float = Field(default=0.0, ge=0.0)
    #: Calls whose price litellm did not know (their cost is not in ``cost_usd``).
    unpriced_calls: int = Field(default=0, ge=0)
    #: The last call: its model, its prompt+completion tokens (what fills the context now)
    #: and the model's context window.
    model: str | None = None
    context_tokens: int = Field(default=0, ge=0)
    context_window: int = Field(default=0, ge=0)


EVENTS: tuple[type[EventModel], ...] = (
    LlmRetrying,
    LlmCallFailed,
    LlmBudgetExceeded,
    UsageTotals,
    LlmCallStarted,
    LlmCallDelta,
    LlmCallCompleted,
)
