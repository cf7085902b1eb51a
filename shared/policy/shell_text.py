"""How bash reads the text of one word: quotes, parameter expansions, ``~``, here-doc delimiters.

Pure helpers of :mod:`jidocode.shared.policy.shell`.
"""

from __future__ import annotations

import re
from typing import Final


def unquoted(raw: str) -> str:
    """The characters of ``raw`` outside quotes and escapes (what bash may expand)."""
    out: list[str] = []
    i, quote = 0, ""
    while i < len(raw):
        c = raw[i]
        if quote == "'":
            if c == "'":
                quote = ""
        elif quote == '"':
            if c == "\\":
                i += 1
            elif c == '"':
                quote = ""
        elif c == "\\":
            i += 1
        elif c in "'\"":
            quote = c
        else:
            out.append(c)
        i += 1
    return "".join(out)


_PARAM_NAME: Final = r"(?:[A-Za-z_][A-Za-z0-9_]*(?:\[(?:[0-9]+|@|\*)\])?|[0-9]+|[@*#?$!_-])"
_PARAM_PLAIN: Final = re.compile(rf"#?{_PARAM_NAME}")
_PARAM_OP: Final = re.compile(
    rf"{_PARAM_NAME}(?::?[-+=?]|##?|%%?|//?|/#|/%|\^\^?|,,?)(?P<word>.*)", re.DOTALL
)
_PARAM_SUBSTRING: Final = re.compile(rf"{_PARAM_NAME}:[ ]*-?[0-9]+(?::[ ]*-?[0-9]+)?")
#: Characters that would make the word of ``${x:-word}`` run or expand something.
_PARAM_WORD_UNSAFE: Final = re.compile(r"[$`\\'\"(){}\[\]<>!]")
_ASSIGNMENT_LIKE: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\+?=")


def parameter_problem(raw: str) -> str | None:
    """Why the parameter expansion ``raw`` (``$x``, ``${…}``) may run code; ``None`` when it cannot."""
    if not raw.startswith("${"):
        return None  # $x, $1, $@, $'…' (its value is only dynamic)
    inner = raw[2:-1] if raw.endswith("}") else raw[2:]
    if _PARAM_PLAIN.fullmatch(inner) or _PARAM_SUBSTRING.fullmatch(inner):
        return None
    m = _PARAM_OP.fullmatch(inner)
    if m is not None and not _PARAM_WORD_UNSAFE.search(m.group("word")):
        return None
    return f"parameter expansion {raw[:60]} (operators, subscripts, indirection or nested expansions can run code)"


def expands_tilde(raw: str) -> bool:
    """Whether bash expands a ``~`` in the word written as ``raw``."""
    if raw.startswith("~"):
        return True
    return _ASSIGNMENT_LIKE.match(raw) is not None and re.search(r"[=:]~", raw) is not None


_QUOTED_HEREDOC: Final = re.compile(
    r"<<(-?)([ \t]*)(?:(['\"])([A-Za-z_][A-Za-z0-9_]*)\3|\\([A-Za-z_][A-Za-z0-9_]*))"
)


def unquote_heredocs(command: str) -> tuple[str, frozenset[int]]:
    """bashlex reads ``<<'EOF'`` as wanting a line ``'EOF'``: blank the quotes out (same length).

    Returns the text to parse and where each quoted delimiter word now starts
    (its body is literal: no expansion is checked there).
    """
    starts: list[int] = []

    def blank(m: re.Match[str]) -> str:
        name = m.group(4) or m.group(5)
        head = "<<" + m.group(1) + m.group(2)
        starts.append(m.start() + len(head) + 1)
        tail = " " if m.group(4) else ""
        return head + " " + name + tail

    return _QUOTED_HEREDOC.sub(blank, command), frozenset(starts)
