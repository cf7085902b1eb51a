"""Bounded exponential backoff for rate limits and transient provider errors (pure)."""

from __future__ import annotations

__all__ = ["MAX_RETRY_AFTER_S", "backoff_delay"]

#: A provider's ``Retry-After`` is honoured up to this many seconds.
MAX_RETRY_AFTER_S = 60.0


def backoff_delay(attempt: int, *, base_s: float, cap_s: float, retry_after_s: float | None = None) -> float:
    """Seconds to wait before retry number ``attempt`` (1-based).

    ``base_s * 2**(attempt-1)`` capped at ``cap_s``; a provider's
    ``Retry-After`` wins when larger, itself capped at
    :data:`MAX_RETRY_AFTER_S`. Never negative.
    """
    if attempt < 1:
        raise ValueError("attempt is 1-based")
    delay = min(cap_s, base_s * (2 ** min(attempt - 1, 30)))
    if retry_after_s is not None and retry_after_s > delay:
        delay = min(retry_after_s, MAX_RETRY_AFTER_S)
    return float(max(0.0, delay))
