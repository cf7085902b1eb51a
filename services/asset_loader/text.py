"""Pure helpers shared by every loader: bytes to text, frontmatter, names, tool lists.

Every function returns diagnostics instead of raising, so one bad file only
ever produces a :class:`Diagnostic` naming that file.
"""

from __future__ import annotations

import json
import re
from typing import Any, Final

from jidocode.shared.settings import Diagnostic

from .safe_yaml import DEFAULT_LIMITS, YamlError, YamlLimits, load_yaml

__all__ = [
    "MAX_ASSET_BYTES",
    "MAX_FRONTMATTER_CHARS",
    "SLUG",
    "decode_text",
    "is_slug",
    "jsonable",
    "name_problem",
    "parse_tool_list",
    "split_frontmatter",
]

#: A file larger than this is not decoded at all.
MAX_ASSET_BYTES: Final = 512 * 1024
MAX_FRONTMATTER_CHARS: Final = 64 * 1024

#: Agent Skills names: lowercase letters, digits and single hyphens, 1-64 characters.
SLUG: Final = re.compile(r"^[a-z0-9]+(?:-[a-z0-9]+)*$")

_FENCE: Final = re.compile(r"^---[ \t]*\r?\n")
_END: Final = re.compile(r"^(?:---|\.\.\.)[ \t]*\r?$", re.MULTILINE)
_TOP_KEY: Final = re.compile(r"^([A-Za-z][A-Za-z0-9_-]*)[ \t]*:[ \t]*(\S[^\r\n]*?)[ \t]*(\r?)$", re.MULTILINE)


def is_slug(name: str, max_len: int = 64) -> bool:
    return 0 < len(name) <= max_len and SLUG.fullmatch(name) is not None


def name_problem(name: object, expected: str, where: str) -> str | None:
    """What is wrong with an asset's ``name`` (``None`` when nothing is).

    It must be a string, a slug, and equal to ``expected`` — the name of its
    file or folder, described by ``where`` ("file name", "folder").
    """
    if not isinstance(name, str):
        return f"name must be a string, got {type(name).__name__}"
    if not is_slug(name):
        return f"name {name!r} is not a slug (a-z, 0-9, single hyphens, at most 64 characters)"
    if name != expected:
        return f"name {name!r} does not match its {where} {expected!r}"
    return None


def decode_text(
    raw: bytes, file: str, *, max_bytes: int = MAX_ASSET_BYTES
) -> tuple[str | None, list[Diagnostic]]:
    """UTF-8 text of ``raw``: size cap first, a BOM is dropped with a warning."""
    diags: list[Diagnostic] = []
    if len(raw) > max_bytes:
        return None, [Diagnostic(file=file, problem=f"file is larger than {max_bytes} bytes, not read")]
    if raw.startswith(b"\xef\xbb\xbf"):
        diags.append(Diagnostic(file=file, problem="UTF-8 byte order mark, ignored", severity="warning"))
        raw = raw[3:]
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        return None, [*diags, Diagnostic(file=file, problem=f"not valid UTF-8 at byte {exc.start}")]
    if "\x00" in text:
        return None, [*diags, Diagnostic(file=file, problem="contains a NUL character (binary file?)")]
    return text, diags


def _verbatim(block: str, keys: frozenset[str]) -> str:
    """``block`` with the one-line value of each top-level key of ``keys`` quoted as a string."""

    def quote(match: re.Match[str]) -> str:
        value = match.group(2)
        if match.group(1) not in keys or value[:1] in ("'", '"'):
            return match.group(0)
        return f"{match.group(1)}: {json.dumps(value)}{match.group(3)}"

    return _TOP_KEY.sub(quote, block)


def split_frontmatter(
    text: str, file: str, *, limits: YamlLimits = DEFAULT_LIMITS, verbatim: frozenset[str] = frozenset()
) -> tuple[dict[str, Any] | None, str, list[Diagnostic]]:
    """Split ``---`` YAML frontmatter from the markdown body.

    Returns ``(frontmatter, body, diagnostics)``. No frontmatter gives ``{}``
    and the whole text as body; unusable frontmatter gives ``None``. The
    one-line value of a top-level key in ``verbatim`` is a string as written
    (Claude Code's ``argument-hint: [pr-number] [priority]`` is no YAML list).
    """
    match = _FENCE.match(text)
    if match is None:
        return {}, text, []
    rest = text[match.end() :]
    end = _END.search(rest)
    if end is None:
        return None, text, [Diagnostic(file=file, problem="frontmatter is not closed by a '---' line")]
    block = _verbatim(rest[: end.start()], verbatim) if verbatim else rest[: end.start()]
    body = rest[end.end() :].lstrip("\r\n")
    if len(block) > MAX_FRONTMATTER_CHARS:
        return (
            None,
            body,
            [Diagnostic(file=file, problem=f"frontmatter longer than {MAX_FRONTMATTER_CHARS} characters")],
        )
    try:
        data = load_yaml(block, limits=limits)
    except YamlError as exc:
        return None, body, [Diagnostic(file=file, key="frontmatter", problem=str(exc))]
    if data is None:
        return {}, body, []
    if not isinstance(data, dict):
        return None, body, [Diagnostic(file=file, key="frontmatter", problem="frontmatter must be a mapping")]
    bad = [k for k in data if not isinstance(k, str)]
    if bad:
        return None, body, [Diagnostic(file=file, key="frontmatter", problem=f"non-string key {bad[0]!r}")]
    return data, body, []


def jsonable(value: Any) -> Any:
    """``value`` reduced to JSON types (sets become lists, other objects strings)."""
    try:
        return json.loads(json.dumps(value, default=_default))
    except (TypeError, ValueError, RecursionError):
        return None


def _default(value: Any) -> Any:
    if isinstance(value, set | frozenset):
        return sorted(value, key=str)
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return str(value)


def parse_tool_list(value: Any, file: str, key: str) -> tuple[list[str], list[Diagnostic]]:
    """``allowed-tools``: ``"Read, Write, Bash(python:*)"``, space separated, or a list."""
    if value is None:
        return [], []
    if isinstance(value, list):
        if all(isinstance(v, str) for v in value):
            return [v.strip() for v in value if v.strip()], []
        return [], [Diagnostic(file=file, key=key, problem="must be a list of strings")]
    if not isinstance(value, str):
        return [], [Diagnostic(file=file, key=key, problem="must be a string or a list of strings")]
    items: list[str] = []
    depth = 0
    current: list[str] = []
    for ch in value:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth = max(0, depth - 1)
        if depth == 0 and (ch == "," or ch.isspace()):
            if current:
                items.append("".join(current))
                current = []
            continue
        current.append(ch)
    if current:
        items.append("".join(current))
    if depth:
        return items, [Diagnostic(file=file, key=key, problem="unbalanced parentheses", severity="warning")]
    return items, []
