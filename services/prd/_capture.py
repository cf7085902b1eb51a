"""The kept output of a check (pure): its first and its last bytes, within a cap.

A check's verdict is usually at the end of its output (pytest's summary, a compiler's last
error) and its cause near the start; keeping only the head, as the bash tool does, would
drop the summary of a long run. So the first half of the cap is the head, the second half
a rolling tail, and the text between is replaced by one marker naming how much was left out.
"""

from __future__ import annotations

import codecs
from typing import Final

__all__ = ["OMISSION_MARK", "HeadTail"]

OMISSION_MARK: Final = "\n[… {omitted} bytes of output left out; {total} bytes in all …]\n"


class HeadTail:
    """Bytes fed in pieces; :meth:`text` gives all of them when they fit in ``cap``, else the
    head (``cap - cap // 2`` bytes) and the tail (``cap // 2`` bytes) around a marker.

    Memory stays within ``2 * cap`` bytes whatever is fed.
    """

    def __init__(self, cap: int) -> None:
        if cap < 2:
            raise ValueError(f"cap must be at least 2 bytes, not {cap}")
        self.cap = cap
        self._head_cap = cap - cap // 2
        self._tail_cap = cap // 2
        self._head = bytearray()
        self._tail = bytearray()
        self.total = 0

    def feed(self, chunk: bytes) -> None:
        self.total += len(chunk)
        room = self._head_cap - len(self._head)
        if room > 0:
            self._head += chunk[:room]
            chunk = chunk[room:]
        if chunk:
            self._tail += chunk
            if len(self._tail) > 2 * self._tail_cap:  # trim now and then, not on every chunk
                del self._tail[: len(self._tail) - self._tail_cap]

    @property
    def truncated(self) -> bool:
        return self.total > self.cap

    def text(self) -> tuple[str, bool]:
        """The kept output decoded (invalid UTF-8 replaced; a character cut at a seam dropped), and
        whether anything was left out."""
        if not self.truncated:
            return (bytes(self._head) + bytes(self._tail)).decode("utf-8", "replace"), False
        tail = bytes(self._tail[len(self._tail) - self._tail_cap :]) if self._tail_cap else b""
        # the head without a character cut at its end, the tail without one cut at its start
        head = codecs.getincrementaldecoder("utf-8")("replace").decode(bytes(self._head))
        skip = 0
        while skip < min(3, len(tail)) and 0x80 <= tail[skip] <= 0xBF:
            skip += 1
        omitted = self.total - len(self._head) - len(tail)
        mark = OMISSION_MARK.format(omitted=omitted, total=self.total)
        return head + mark + tail[skip:].decode("utf-8", "replace"), True
