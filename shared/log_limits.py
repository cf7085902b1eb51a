"""Bounded logging: the same line repeated in a flood is said a few times, then summarised.

A NATS outage made every service log the same warnings tens of times a second
(about 34,000 lines, mostly "outbound buffer limit exceeded"). :class:`RepeatLimiter`
is a :class:`logging.Filter` on the services' handler: per *kind* of line (its
logger, level and message with the digits taken out, so "attempt 7" and
"attempt 8" are one kind) it lets :data:`BURST` records through per
:data:`WINDOW_S` seconds, drops the rest, and the first record let through after
a quiet spell carries how many were dropped — so an outage reads as a state
change, a few lines, and a summary at a bounded rate. Warnings and errors of
different kinds are never held back by each other.

The decision (:meth:`RepeatLimiter.admit`) is pure over an injected clock.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

__all__ = ["BURST", "MAX_KINDS", "WINDOW_S", "RepeatLimiter", "install_repeat_limiter"]

#: Records of one kind let through per window.
BURST: Final = 3
#: The window, in seconds.
WINDOW_S: Final = 30.0
#: Kinds remembered at once (the oldest is forgotten first): memory stays bounded.
MAX_KINDS: Final = 512

_DIGITS = re.compile(r"\d+")


@dataclass
class _Kind:
    window_start: float
    passed: int = 0
    dropped: int = 0


class RepeatLimiter(logging.Filter):
    """Let :data:`BURST` records of a kind through per :data:`WINDOW_S`; count and report the rest."""

    def __init__(
        self,
        *,
        burst: int = BURST,
        window_s: float = WINDOW_S,
        max_kinds: int = MAX_KINDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__()
        if burst < 1 or window_s <= 0 or max_kinds < 1:
            raise ValueError("burst and max_kinds must be >= 1 and window_s > 0")
        self.burst = burst
        self.window_s = window_s
        self.max_kinds = max_kinds
        self.clock = clock
        self._kinds: dict[tuple[str, int, str], _Kind] = {}

    @staticmethod
    def kind_of(record: logging.LogRecord) -> tuple[str, int, str]:
        return (record.name, record.levelno, _DIGITS.sub("#", record.getMessage()))

    def admit(self, kind: tuple[str, int, str]) -> tuple[bool, int]:
        """Whether a record of ``kind`` goes out now, and how many of its kind were dropped before it."""
        now = self.clock()
        state = self._kinds.get(kind)
        if state is None:
            if len(self._kinds) >= self.max_kinds:
                self._kinds.pop(next(iter(self._kinds)))
            state = self._kinds[kind] = _Kind(window_start=now)
        elif now - state.window_start >= self.window_s:
            state.window_start, state.passed = now, 0
        if state.passed >= self.burst:
            state.dropped += 1
            return False, 0
        state.passed += 1
        dropped, state.dropped = state.dropped, 0
        return True, dropped

    def filter(self, record: logging.LogRecord) -> bool:
        go, dropped = self.admit(self.kind_of(record))
        if go and dropped:
            record.msg = f"{record.getMessage()} (and {dropped} more like it, not shown)"
            record.args = None
        return go


def install_repeat_limiter(limiter: RepeatLimiter | None = None) -> RepeatLimiter:
    """Put one limiter on every handler of the root logger (the services' output)."""
    limiter = limiter or RepeatLimiter()
    for handler in logging.getLogger().handlers:
        if not any(isinstance(f, RepeatLimiter) for f in handler.filters):
            handler.addFilter(limiter)
    return limiter
