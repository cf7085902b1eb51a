"""bash's brace and pathname expansion, bounded (for judging what a word may become).

:func:`brace_expand` turns ``t{o,}uch`` into ``touch`` and ``tuch`` and
``f{1..3}`` into three words; :func:`glob_paths` matches a glob against the
file system one component at a time under a budget of directory entries, so
a pattern such as ``/*/*/*/*/x`` costs a bounded amount of work.
"""

from __future__ import annotations

import fnmatch
import os
import re
from typing import Final

__all__ = ["MAX_BRACE_WORDS", "MAX_GLOB_ENTRIES", "MAX_GLOB_MATCHES", "brace_expand", "glob_paths"]

#: Bash matches a glob against the file system; more matches than this are not followed.
MAX_GLOB_MATCHES: Final = 256
#: …and neither is a glob whose expansion would scan more directory entries than this.
MAX_GLOB_ENTRIES: Final = 20_000
#: At most this many words come out of one word's brace expansion.
MAX_BRACE_WORDS: Final = 256

_SEQUENCE: Final = re.compile(r"(-?\d{1,6})\.\.(-?\d{1,6})(?:\.\.(-?\d{1,6}))?|([A-Za-z])\.\.([A-Za-z])")


def _alternatives(body: str) -> list[str] | None:
    """The words a brace body stands for (``a,b`` or a sequence), or ``None`` if it is literal."""
    parts: list[str] = []
    depth, start = 0, 0
    for i, c in enumerate(body):
        if c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
        elif c == "," and depth == 0:
            parts.append(body[start:i])
            start = i + 1
    if parts:
        return [*parts, body[start:]]
    m = _SEQUENCE.fullmatch(body)
    if m is None:
        return None
    if m.group(4):
        a, b = ord(m.group(4)), ord(m.group(5))
        step = 1 if b >= a else -1
        return [chr(c) for c in range(a, b + step, step)][:MAX_BRACE_WORDS]
    lo, hi = int(m.group(1)), int(m.group(2))
    inc = abs(int(m.group(3) or 1)) or 1
    step = inc if hi >= lo else -inc
    return [str(n) for n in range(lo, hi + (1 if step > 0 else -1), step)][:MAX_BRACE_WORDS]


def brace_expand(word: str) -> list[str]:
    """The words bash's brace expansion makes of ``word`` (quotes are not honoured: a superset)."""
    depth, start = 0, -1
    for i, c in enumerate(word):
        if c == "{":
            if depth == 0:
                start = i
            depth += 1
        elif c == "}" and depth:
            depth -= 1
            if depth == 0:
                alts = _alternatives(word[start + 1 : i])
                if alts is None:
                    continue
                out: list[str] = []
                for alt in alts:
                    out.extend(brace_expand(word[:start] + alt + word[i + 1 :]))
                    if len(out) >= MAX_BRACE_WORDS:
                        return out[:MAX_BRACE_WORDS]
                return out
    return [word]


def glob_paths(base: str, pattern: str) -> list[str] | None:
    """bash's expansion of ``pattern`` relative to ``base``; ``None`` when it is too large to follow.

    Like bash without ``dotglob``, a name starting with ``.`` matches only a
    component that starts with ``.``; ``[^…]`` is read as ``[!…]``. No match
    gives an empty list (bash then passes the pattern on as it is).
    """
    budget = MAX_GLOB_ENTRIES
    current = ["/"] if os.path.isabs(pattern) else [base]
    for part in pattern.split("/"):
        if part in ("", "."):
            continue
        if not any(c in part for c in "*?["):
            current = [os.path.join(c, part) for c in current]
            continue
        rx = part.replace("[^", "[!")
        found: list[str] = []
        for directory in current:
            try:
                entries = list(os.scandir(directory))
            except OSError:
                continue
            budget -= len(entries)
            if budget < 0:
                return None
            found.extend(
                os.path.join(directory, e.name)
                for e in entries
                if (part.startswith(".") or not e.name.startswith(".")) and fnmatch.fnmatchcase(e.name, rx)
            )
        current = found
        if len(current) > MAX_GLOB_MATCHES:
            return None
    return sorted(os.path.normpath(p) for p in current if os.path.lexists(p))
