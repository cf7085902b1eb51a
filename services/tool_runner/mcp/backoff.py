"""When a crashed MCP server may start again (pure): exponential backoff, forgiven after a healthy run."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

__all__ = ["BACKOFF_INITIAL_S", "BACKOFF_MAX_S", "HEALTHY_AFTER_S", "Backoff"]

BACKOFF_INITIAL_S: Final = 0.5
BACKOFF_MAX_S: Final = 30.0
#: A server that ran this long before it crashed starts its backoff over.
HEALTHY_AFTER_S: Final = 60.0


@dataclass
class Backoff:
    """Crash bookkeeping of one server; times are ``time.monotonic()`` values given by the caller."""

    initial_s: float = BACKOFF_INITIAL_S
    max_s: float = BACKOFF_MAX_S
    healthy_after_s: float = HEALTHY_AFTER_S
    crashes: int = 0
    _not_before: float = 0.0

    def __post_init__(self) -> None:
        if not 0 < self.initial_s <= self.max_s:
            raise ValueError("backoff: need 0 < initial_s <= max_s")
        if self.healthy_after_s <= 0:
            raise ValueError("backoff: healthy_after_s must be positive")

    def crashed(self, now: float, *, started_at: float) -> float:
        """Record a crash of a server started at ``started_at``; the delay before the next start."""
        if now - started_at >= self.healthy_after_s:
            self.crashes = 0
        self.crashes += 1
        delay = float(min(self.max_s, self.initial_s * 2 ** (self.crashes - 1)))
        self._not_before = now + delay
        return delay

    def wait(self, now: float) -> float:
        """Seconds until the server may start again (0: now)."""
        return max(0.0, self._not_before - now)
