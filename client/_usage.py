"""``JidoClient.get_context_usage()``: how full the model's context is, and the conversation's totals."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict

from jidocode.shared.events.llm import UsageTotals

__all__ = ["ContextUsage", "context_usage_of"]


class ContextUsage(BaseModel):
    """``get_context_usage()``: how full the model's context is, and the conversation's totals."""

    model_config = ConfigDict(frozen=True)

    model: str | None = None
    tokens_used: int = 0
    context_window: int = 0
    percent_used: float = 0.0
    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
    total_tokens: int = 0
    #: The calls that had a price; with ``unpriced_calls`` the total is unknown (``jidocode.shared.cost``).
    cost_usd: float = 0.0
    unpriced_calls: int = 0

    def __getitem__(self, key: str) -> Any:  # seed 003 reads usage['percent_used']
        return getattr(self, key)


def context_usage_of(totals: UsageTotals, ledger: UsageTotals) -> ContextUsage:
    """The context fill and window from the token ledger's totals, else (no call in the ledger:
    a conversation service without one) from the conversation's ``usage`` projection ``totals``,
    which also give the conversation's counts."""
    last = totals if ledger.calls == 0 and totals.calls > 0 else ledger
    used, window = last.context_tokens, last.context_window
    return ContextUsage(
        model=last.model,
        tokens_used=used,
        context_window=window,
        percent_used=round(100.0 * used / window, 2) if window else 0.0,
        calls=totals.calls,
        prompt_tokens=totals.prompt_tokens,
        completion_tokens=totals.completion_tokens,
        cached_tokens=totals.cached_tokens,
        total_tokens=totals.total_tokens,
        cost_usd=totals.cost_usd,
        unpriced_calls=totals.unpriced_calls,
    )
