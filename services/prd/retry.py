"""The retry policy of transient provider failures (pure; seed 004 defaults).

STUB (interface fixed; the ``prd-core`` branch implements it).
"""

from __future__ import annotations

from pydantic import BaseModel

__all__ = ["RetryPolicy"]


class RetryPolicy(BaseModel):
    #: Retries after the first attempt (so ``max_retries + 1`` attempts at most).
    max_retries: int = 3
    #: Delay before retry n (1-based) is ``retry_delays_s[min(n, len) - 1]``.
    retry_delays_s: list[float] = [0.0, 5.0, 15.0]

    def delay_before(self, retry: int) -> float | None:
        """Seconds to wait before retry number ``retry`` (1-based); ``None`` when out of retries."""
        raise NotImplementedError

    def retryable(self, failure_kind: str) -> bool:
        """Whether a failure of this kind is retried (``transient`` and ``checks``)."""
        raise NotImplementedError
