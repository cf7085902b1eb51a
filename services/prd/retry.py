"""The retry policy of failed iterations (pure; seed 004 defaults ``maxRetries = 3``,
``retryDelays = [0s, 5s, 15s]``).

Which failures are retried (docs/decisions/0271-what-the-loop-retries.md):

- ``transient``: the provider failed in a way that may pass (a timeout, a dropped connection, a
  rate limit) — the seed's "transient adapter failures";
- ``checks``: the iteration ended but a quality check failed; the next attempt gets the failure
  output in its prompt, which is how the loop fixes a failing test;
- ``nothing_done``: the iteration ended without the story done (the provider did not say so, or
  nothing changed and no check ran: docs/decisions/0336-a-pass-means-work-done-and-checked.md);
- not ``config`` (nothing changes until the user edits the config), ``fatal`` / ``provider`` /
  ``git`` / ``internal`` (retrying would repeat the same error) nor ``cancelled`` (the user paused
  or stopped the loop).

The policy is validated when built (keyword-only, before any I/O): a negative count or delay, more
than :data:`MAX_RETRIES` retries or a delay over :data:`MAX_DELAY_S` is ``ValidationError``.
"""

from __future__ import annotations

from typing import Annotated, Final

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["MAX_DELAY_S", "MAX_RETRIES", "RETRYABLE_KINDS", "RetryPolicy"]

MAX_RETRIES: Final = 20
MAX_DELAY_S: Final = 3600.0
#: Failure kinds retried while retries remain.
RETRYABLE_KINDS: Final = frozenset({"transient", "checks", "nothing_done"})

Delay = Annotated[float, Field(ge=0.0, le=MAX_DELAY_S, allow_inf_nan=False)]


class RetryPolicy(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    #: Retries after the first attempt (so ``max_retries + 1`` attempts at most).
    max_retries: int = Field(default=3, ge=0, le=MAX_RETRIES)
    #: Delay before retry n (1-based) is ``retry_delays_s[min(n, len) - 1]``; empty: no delay.
    retry_delays_s: list[Delay] = Field(default_factory=lambda: [0.0, 5.0, 15.0], max_length=MAX_RETRIES)

    def delay_before(self, retry: int) -> float | None:
        """Seconds to wait before retry number ``retry`` (1-based); ``None`` when out of retries.

        A retry beyond the list waits as long as the last delay (the backoff is bounded).
        """
        if retry < 1:
            raise ValueError(f"retry numbers start at 1, got {retry}")
        if retry > self.max_retries:
            return None
        if not self.retry_delays_s:
            return 0.0
        return self.retry_delays_s[min(retry, len(self.retry_delays_s)) - 1]

    def retryable(self, failure_kind: str) -> bool:
        """Whether a failure of this kind is retried (``transient``, ``checks``, ``nothing_done``)."""
        return failure_kind in RETRYABLE_KINDS
