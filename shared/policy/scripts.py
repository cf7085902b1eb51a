"""Programs inside arguments: sed scripts and awk programs, read closely enough to refuse the risky ones.

Both languages can run commands, read and write files of their own choosing:
sed through ``e``, ``w``, ``W``, ``r``, ``R`` and the ``e``/``w`` flags of
``s``; awk through ``system``, pipes, ``getline`` and ``print > file``. A
script is *safe* only when every command in it was recognised and none of
those is present; anything this reader does not follow is risky, so a
mis-parse errs towards asking.
"""

from __future__ import annotations

import re
from typing import Final

__all__ = ["awk_risk", "sed_risk"]

# --- sed -----------------------------------------------------------------------------

#: Commands with no argument (``q``/``Q``/``l``/``L`` take an optional number).
_SED_SIMPLE: Final = frozenset("=dDgGhHlnNpPqQxzF")
#: Commands that run programs or touch files named in the script.
_SED_RISKY: Final = {
    "e": "runs a command",
    "w": "writes a file",
    "W": "writes a file",
    "r": "reads a file",
    "R": "reads a file",
    "v": "version check (GNU)",
}
_SED_ADDRESS: Final = re.compile(r"\d+(?:~\d+)?|\$")


class _SedError(Exception):
    pass


def _bracket_end(script: str, i: int) -> int:
    """Index just past the ``]`` closing the bracket expression opened at ``script[i]`` (GNU sed)."""
    n = len(script)
    j = i + 1
    if j < n and script[j] == "^":
        j += 1
    if j < n and script[j] == "]":
        j += 1
    while j < n and script[j] != "]":
        if script[j] == "[" and j + 1 < n and script[j + 1] in ":.=":
            close = script.find(script[j + 1] + "]", j + 2)
            if close < 0:
                raise _SedError("unterminated character class")
            j = close + 2
        elif script[j] == "\n":
            raise _SedError("newline inside a bracket expression")
        else:
            j += 1
    if j >= n:
        raise _SedError("unterminated bracket expression")
    return j + 1


def _sed_regex_end(script: str, i: int, delim: str, *, brackets: bool = True) -> int:
    """Index just past the closing ``delim`` of a regex starting after ``script[i - 1]``.

    In a regex (not a replacement) a bracket expression may hold the
    delimiter, as GNU sed reads ``s/[/]/x/``.
    """
    n = len(script)
    while i < n:
        c = script[i]
        if c == "\\":
            i += 2
            continue
        if brackets and c == "[":
            i = _bracket_end(script, i)
            continue
        if c == "\n":
            raise _SedError("newline inside a regex")
        if c == delim:
            return i + 1
        i += 1
    raise _SedError("unterminated regex")


def _sed_address(script: str, i: int) -> int:
    n = len(script)
    if i >= n:
        return i
    m = _SED_ADDRESS.match(script, i)
    if m:
        return m.end()
    if script[i] == "/":
        i = _sed_regex_end(script, i + 1, "/")
    elif script[i] == "\\" and i + 1 < n:
        i = _sed_regex_end(script, i + 2, script[i + 1])
    else:
        return i
    while i < n and script[i] in "IM":
        i += 1
    return i


def _skip_blank(script: str, i: int) -> int:
    while i < len(script) and script[i] in " \t":
        i += 1
    return i


def _sed_command_end(script: str, i: int) -> int:
    """Past the end of a command: the next ``;``, newline or ``}`` (not consumed for ``}``)."""
    i = _skip_blank(script, i)
    if i < len(script) and script[i] in ";\n":
        return i + 1
    if i >= len(script) or script[i] == "}" or script[i] == "#":
        return i
    raise _SedError(f"unexpected {script[i]!r} after a command")


def _sed_scan(script: str) -> str | None:
    """The first risky thing in ``script`` (a reason), or ``None`` when it is safe."""
    i, n = 0, len(script)
    while True:
        i = _sed_next_command(script, i)
        if i >= n:
            return None
        i = _sed_addresses(script, i)
        if i >= n:
            raise _SedError("address without a command")
        i, risk = _sed_command(script, i + 1, script[i])
        if risk is not None:
            return risk


def _sed_next_command(script: str, i: int) -> int:
    """Past blanks, ``;``, comments and braces: where the next command (or its address) starts."""
    n = len(script)
    while i < n:
        c = script[i]
        if c == "#":
            while i < n and script[i] != "\n":
                i += 1
        elif c in " \t\n;{}":
            i += 1
        else:
            return i
    return i


_SED_STEP: Final = re.compile(r"[+~]\d+")


def _sed_addresses(script: str, i: int) -> int:
    """Past a command's addresses (``1``, ``/re/``, ``a,b``, ``a,+N``) and its ``!`` negations."""
    n = len(script)
    i = _skip_blank(script, _sed_address(script, i))
    if i < n and script[i] == ",":
        i = _skip_blank(script, i + 1)
        if i < n and script[i] in "+~":
            m = _SED_STEP.match(script, i)
            if not m:
                raise _SedError("bad address")
            i = m.end()
        else:
            i = _sed_address(script, i)
    i = _skip_blank(script, i)
    while i < n and script[i] == "!":
        i = _skip_blank(script, i + 1)
    return i


def _sed_command(script: str, i: int, c: str) -> tuple[int, str | None]:
    """Read the command ``c`` whose arguments start at ``i``: (where it ends, why it is risky or ``None``)."""
    if c in _SED_RISKY:
        return i, f"the {c!r} command {_SED_RISKY[c]}"
    if c in "{}":
        return i, None
    if c in _SED_SIMPLE:
        if c in "qQlL":
            i = _skip_blank(script, i)
            while i < len(script) and script[i].isdigit():
                i += 1
        return _sed_command_end(script, i), None
    if c in ":btT":
        # a label: one word; anything else after it must end the command
        i = _skip_blank(script, i)
        while i < len(script) and script[i] not in "; \t\n}":
            i += 1
        return _sed_command_end(script, i), None
    if c in "aic":
        return _sed_text_end(script, i), None
    if c in "sy":
        return _sed_substitute(script, i, c)
    raise _SedError(f"unknown command {c!r}")


def _sed_text_end(script: str, i: int) -> int:
    """``a``, ``i``, ``c``: their text runs to the end of the line; a trailing backslash continues it."""
    n = len(script)
    while i < n:
        if script[i] == "\\":
            i += 2
            continue
        if script[i] == "\n":
            break
        i += 1
    return i


def _sed_substitute(script: str, i: int, c: str) -> tuple[int, str | None]:
    """``s/re/text/flags`` or ``y/abc/xyz/``: (where it ends, why its flags are risky or ``None``)."""
    n = len(script)
    if i >= n or script[i] in "\\\n ":
        raise _SedError(f"bad delimiter after {c}")
    delim = script[i]
    i = _sed_regex_end(script, i + 1, delim, brackets=c == "s")
    i = _sed_regex_end(script, i, delim, brackets=False)
    if c != "s":
        return _sed_command_end(script, i), None
    start = i
    while i < n and script[i] not in ";\n}#":
        i += 1
    flags = script[start:i].strip()
    if "e" in flags:
        return i, "the 's///e' flag runs the pattern space as a command"
    if "w" in flags:
        return i, "the 's///w' flag writes a file"
    if not re.fullmatch(r"[gpiImM0-9]*", flags):
        raise _SedError(f"unknown s flags {flags!r}")
    return i, None


def sed_risk(script: str) -> str | None:
    """Why the sed ``script`` is risky (runs commands, reads or writes files), or ``None``."""
    try:
        return _sed_scan(script)
    except _SedError as exc:
        return f"script not understood ({exc})"
    except IndexError:
        return "script not understood"


# --- awk -------------------------------------------------------------------------------

_AWK_RISKY: Final = re.compile(r"system|getline|[|>@]|ENVIRON|PROCINFO")


def awk_risk(program: str) -> str | None:
    """Why the awk ``program`` is risky, or ``None``.

    Deliberately coarse: ``>`` also flags a comparison and ``|`` a logical
    or; such programs are asked, never allowed blind. ``@`` covers gawk's
    ``@include``, ``@load`` and indirect calls (``@f()`` with ``f = "system"``).
    """
    m = _AWK_RISKY.search(program)
    if m is None:
        return None
    return f"awk program uses {m.group(0)!r} (commands, pipes, files or the environment)"
