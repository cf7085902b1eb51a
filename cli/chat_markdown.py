"""Markdown of the assistant's answer in ``jidocode chat`` on a terminal, block by block.

The answer streams in deltas; markdown can only be laid out once a block is
whole (a paragraph, a list, a fenced code block). :class:`MarkdownBlocks`
cuts the stream at blank lines outside a code fence, so each finished block is
printed as soon as it ends and the answer still appears while it is written;
what is left at the end of the turn is the last block.

The text is the model's: untrusted. Before rich renders it, every control
character but newline and tab is removed (an escape sequence in an answer
never reaches the terminal), and links are shown as text with their address,
never as terminal hyperlinks.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from rich.console import Console

__all__ = ["MarkdownBlocks", "print_markdown", "strip_controls"]

#: C0 controls but tab and newline, DEL, and the C1 controls (ESC, CSI, OSC … included).
_CONTROLS: Final = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
#: A line opening or closing a fenced code block (``` or ~~~, up to three spaces in).
_FENCE: Final = re.compile(r"^ {0,3}(`{3,}|~{3,})")


def strip_controls(text: str) -> str:
    """``text`` without control characters (newlines and tabs kept)."""
    return _CONTROLS.sub("", text.replace("\r\n", "\n"))


class MarkdownBlocks:
    """Cuts streamed markdown into finished blocks (pure; no I/O).

    ``feed`` returns the blocks the new text finished; ``rest`` is what is
    still open, for the end of the turn.
    """

    def __init__(self) -> None:
        self._pending = ""
        self._fence: str | None = None
        self._block: list[str] = []

    def feed(self, text: str) -> list[str]:
        """Add streamed ``text``; the blocks it completes, in order."""
        self._pending += text
        done: list[str] = []
        while "\n" in self._pending:
            line, self._pending = self._pending.split("\n", 1)
            block = self._line(line)
            if block is not None:
                done.append(block)
        return done

    def rest(self) -> str:
        """What is not printed yet (the open block and an unfinished line); resets the state."""
        lines = [*self._block, self._pending] if self._pending else self._block
        text = "\n".join(lines).strip("\n")
        self._pending, self._fence, self._block = "", None, []
        return text

    def _line(self, line: str) -> str | None:
        fence = _FENCE.match(line)
        if self._fence is not None:
            self._block.append(line)
            if fence and fence.group(1)[0] == self._fence[0] and len(fence.group(1)) >= len(self._fence):
                self._fence = None
            return None
        if fence:
            self._fence = fence.group(1)
            self._block.append(line)
            return None
        if line.strip():
            self._block.append(line)
            return None
        if not self._block:
            return None
        block, self._block = "\n".join(self._block), []
        return block


def print_markdown(console: Console, text: str) -> None:
    """Render one block of the model's markdown (controls stripped, links as plain text)."""
    from rich.markdown import Markdown  # 60 ms of imports: only once an answer is printed

    clean = strip_controls(text)
    if clean.strip():
        console.print(Markdown(clean, hyperlinks=False))
