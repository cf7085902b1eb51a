"""Coalescing a call's streamed text into few ``llm.delta`` signals (pure, the clock is given).

A model streams its answer in pieces of a few characters; one signal per piece
would put hundreds of messages per answer on ``jido.sig.>``, which every
observer receives. :class:`DeltaCoalescer` gathers the pieces and says what to
publish:

- the first piece at once (an observer sees the call answering);
- then what has gathered, when a piece arrives at least ``interval_s`` after the
  last publication (no timer: text waits for the next piece or the end);
- slices of exactly ``max_chars`` characters whenever that much has gathered
  (so no signal is larger than that);
- the rest at the end of the call (:meth:`DeltaCoalescer.flush`).

So ``n`` characters streamed over ``t`` seconds give at most
:func:`max_deltas` ``(n, t)`` = ``n // max_chars + t // interval_s + 2``
publications, and their concatenation is exactly the streamed text.
"""

from __future__ import annotations

import math
from typing import Final

__all__ = [
    "DEFAULT_DELTA_INTERVAL_S",
    "DEFAULT_DELTA_MAX_CHARS",
    "MAX_DELTA_CHARS",
    "DeltaCoalescer",
    "check_delta_limits",
    "max_deltas",
]

#: At most one time-triggered ``llm.delta`` per this many seconds of a call.
DEFAULT_DELTA_INTERVAL_S: Final = 0.25
#: Characters gathered that are published at once, whatever the time (and the most one carries).
DEFAULT_DELTA_MAX_CHARS: Final = 4096
#: The largest ``max_chars`` accepted: 4 bytes a character stays far below the bus payload limit.
MAX_DELTA_CHARS: Final = 16_384


def check_delta_limits(interval_s: float, max_chars: int, *, interval_name: str = "delta_interval_s") -> None:
    """Raise ``ValueError`` naming the option (the interval's is ``interval_name``) when a limit
    is unusable."""
    if not (isinstance(interval_s, (int, float)) and math.isfinite(interval_s) and interval_s > 0):
        raise ValueError(f"{interval_name} must be a positive number of seconds, got {interval_s!r}")
    if isinstance(max_chars, bool) or not isinstance(max_chars, int) or not 1 <= max_chars <= MAX_DELTA_CHARS:
        raise ValueError(f"delta_max_chars must be an integer from 1 to {MAX_DELTA_CHARS}, got {max_chars!r}")


def max_deltas(chars: int, duration_s: float, *, interval_s: float, max_chars: int) -> int:
    """The most publications a call of ``chars`` characters over ``duration_s`` seconds gives."""
    return chars // max_chars + math.floor(duration_s / interval_s) + 2


class DeltaCoalescer:
    """The text of one call, gathered between publications (see the module docstring)."""

    def __init__(self, *, interval_s: float, max_chars: int) -> None:
        check_delta_limits(interval_s, max_chars)
        self.interval_s = float(interval_s)
        self.max_chars = max_chars
        self._pending: list[str] = []
        self._size = 0
        self._last: float | None = None

    def add(self, text: str, now: float) -> list[str]:
        """Take one streamed piece at time ``now``; return the texts to publish now, in order."""
        if not text:
            return []
        self._pending.append(text)
        self._size += len(text)
        out: list[str] = []
        if self._size >= self.max_chars:
            gathered = "".join(self._pending)
            cut = len(gathered) - len(gathered) % self.max_chars
            out.extend(gathered[i : i + self.max_chars] for i in range(0, cut, self.max_chars))
            rest = gathered[cut:]
            self._pending = [rest] if rest else []
            self._size = len(rest)
        if self._size and (self._last is None or now - self._last >= self.interval_s):
            out.append(self._take())
        if out:
            self._last = now
        return out

    def flush(self, now: float | None = None) -> str | None:
        """What is still gathered (the call ended, or ``now`` a timer says it is due), or ``None``."""
        if not self._size:
            return None
        if now is not None:
            self._last = now
        return self._take()

    def due_in(self, now: float) -> float | None:
        """Seconds from ``now`` until the gathered text is due (``None``: nothing gathered)."""
        if not self._size:
            return None
        return 0.0 if self._last is None else max(0.0, self._last + self.interval_s - now)

    def _take(self) -> str:
        text = "".join(self._pending)
        self._pending = []
        self._size = 0
        return text
