"""Where things are in a JSON text: the line and column of a key, a duplicate key, a byte.

``json`` says where a syntax error is (``JSONDecodeError.lineno``/``colno``) but
not where a key is, so a problem found after decoding (``"deny": "Bash"``
where a list is expected, a duplicate key) could only name the key. These pure
functions walk a text ``json`` accepted and give each key's line and column,
1-based as an editor shows them (the column counts characters), so a
diagnostic can say ``settings.json:4:5``.

Nothing here raises: a text that cannot be walked gives what was found before
the point it could not pass.
"""

from __future__ import annotations

import contextlib
import json
import re
from typing import Final

__all__ = ["Position", "byte_position", "duplicate_key", "key_path", "key_positions", "text_position"]

#: ``(line, column)``, both 1-based.
Position = tuple[int, int]
#: A key path: object keys, and ``[n]`` for the n-th item of an array (``("hooks", "pre", "bus")``).
Path = tuple[str, ...]

_SPACE: Final = re.compile(r"[ \t\n\r]*")
_DECODER: Final = json.JSONDecoder()
_INDEX: Final = re.compile(r"\[\d+\]")


def text_position(text: str, offset: int) -> Position:
    """The line and column of character ``offset`` of ``text``."""
    offset = max(0, min(offset, len(text)))
    line = text.count("\n", 0, offset) + 1
    return line, offset - (text.rfind("\n", 0, offset) + 1) + 1


def byte_position(raw: bytes, offset: int) -> Position:
    """The line and column of byte ``offset`` of ``raw`` (the column counts the bytes before it)."""
    offset = max(0, min(offset, len(raw)))
    line = raw.count(b"\n", 0, offset) + 1
    return line, offset - (raw.rfind(b"\n", 0, offset) + 1) + 1


def key_path(key: str) -> Path:
    """``"signal_bus.middleware[0]"`` as ``("signal_bus", "middleware", "[0]")``."""
    out: list[str] = []
    for part in key.split("."):
        name = _INDEX.sub("", part)
        if name:
            out.append(name)
        out.extend(_INDEX.findall(part))
    return tuple(out)


class _Walk:
    """One pass over a JSON text, recording where each key (or array item) starts."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.starts: dict[Path, int] = {}
        self.duplicates: list[tuple[Path, int]] = []

    def _skip(self, i: int) -> int:
        match = _SPACE.match(self.text, i)
        return match.end() if match else i

    def value(self, i: int, path: Path) -> int:
        i = self._skip(i)
        if self.text.startswith("{", i):
            return self._object(i + 1, path)
        if self.text.startswith("[", i):
            return self._array(i + 1, path)
        return int(_DECODER.raw_decode(self.text, i)[1])

    def _object(self, i: int, path: Path) -> int:
        i = self._skip(i)
        if self.text.startswith("}", i):
            return i + 1
        seen: set[str] = set()
        while True:
            at = self._skip(i)
            value, i = _DECODER.raw_decode(self.text, at)
            key = str(value)
            here = (*path, key)
            if key in seen:
                self.duplicates.append((here, at))
            else:
                seen.add(key)
                self.starts.setdefault(here, at)
            i = self.value(self._skip(i) + 1, here)  # past the ':'
            i = self._skip(i)
            if self.text.startswith("}", i):
                return i + 1
            i += 1  # past the ','

    def _array(self, i: int, path: Path) -> int:
        i = self._skip(i)
        if self.text.startswith("]", i):
            return i + 1
        index = 0
        while True:
            here = (*path, f"[{index}]")
            i = self._skip(i)
            self.starts.setdefault(here, i)
            i = self._skip(self.value(i, here))
            if self.text.startswith("]", i):
                return i + 1
            i += 1
            index += 1


def _walk(text: str) -> _Walk:
    walk = _Walk(text)
    # what was found before the point the walk could not pass
    with contextlib.suppress(ValueError, IndexError, RecursionError):
        walk.value(0, ())
    return walk


def key_positions(text: str) -> dict[Path, Position]:
    """The position of every key of ``text`` (its opening quote), by key path (first occurrence)."""
    return {path: text_position(text, at) for path, at in _walk(text).starts.items()}


def duplicate_key(text: str) -> tuple[Path, Position] | None:
    """The first key that appears twice in one object, and where its second occurrence is."""
    walk = _walk(text)
    if not walk.duplicates:
        return None
    path, at = walk.duplicates[0]
    return path, text_position(text, at)
