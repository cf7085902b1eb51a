"""LLM events: calls, visible retries and the token ledger (seed 003 ``TokenLedger``).

Published on ``subjects.signal(<type>)`` (``jido.sig.llm.…``) by the litellm
adapter of the conversation service. ``llm.usage`` is the ledger's one input:
every completed call, with its tokens and its cost where litellm knows the
price. ``llm.usage.totals`` is the shape of the ledger's sums for a project or
one conversation (stored in the ``jido_llm_ledger`` KV bucket, not published).
"""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field

from ._base import EventModel

__all__ = [
    "EVENTS",
    "LlmBudgetExceeded",
    "LlmCallFailed",
    "LlmRetrying",
    "LlmUsage",
    "UsageTotals",
]


class LlmRetrying(EventModel):
    """A call failed transiently (rate limit, 5xx, timeout) and is retried after ``delay_s``."""

    type: Literal["llm.retrying"] = "llm.retrying"
    project_id: str
    conversation_id: str
    correlation_id: str | None = None
    model: str
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


class LlmUsage(EventModel):
    """Usage of one completed call: the ledger's input."""

    type: Literal["llm.usage"] = "llm.usage"
    project_id: str
    conversation_id: str
    correlation_id: str | None = None
    model: str
    prompt_tokens: int = Field(default=0, ge=0)
    completion_tokens: int = Field(default=0, ge=0)
    cached_tokens: int = Field(default=0, ge=0)
    total_tokens: int = Field(default=0, ge=0)
    #: ``None`` when litellm does not know the model's price.
    cost_usd: float | None = Field(default=None, ge=0.0)
    duration_ms: float = Field(default=0.0, ge=0.0)
    #: Retries this call needed before it succeeded.
    retries: int = Field(default=0, ge=0)
    #: The model's context window (litellm's model map, else a default).
    context_window: int = Field(default=0, ge=0)


class LlmBudgetExceeded(EventModel):
    """A conversation used up its token or cost budget; its LLM loop stops."""

    type: Literal["llm.budget.exceeded"] = "llm.budget.exceeded"
    project_id: str
    conversation_id: str
    used_tokens: int = Field(ge=0)
    budget_tokens: int | None = None
    used_usd: float = Field(default=0.0, ge=0.0)
    budget_usd: float | None = None


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
    LlmUsage,
    LlmBudgetExceeded,
    UsageTotals,
)
