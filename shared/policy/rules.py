"""Permission rules in the ``Tool(pattern)`` form of settings.json (seed 001), pure.

Grammar (anything else is an :class:`InvalidRule`, raised at project start)::

    rule     := name | name "(" pattern ")"
    name     := Bash | Read | Write | Edit | Glob | Grep | LS | a tool name
                ([A-Za-z][A-Za-z0-9_-]*, e.g. read_file, mcp__github__create_issue,
                 mcp__github to mean every tool of that MCP server)
    pattern  := for Bash: "<words>" (the exact command) or "<words>:*" (the
                command starts with these words); for path tools: a glob where
                "**" spans directories and "*" stays within one, relative to the
                project root, "/abs/…" or "~/…"

Which tools a rule name covers:

==========  ==============================================
``Bash``    ``bash``
``Read``    ``read_file``, ``list_dir``, ``glob``, ``grep``
``Edit``    ``write_file``, ``edit_file`` (``Write`` is the same)
``Glob``    ``glob``; ``Grep``: ``grep``; ``LS``: ``list_dir``
other       the tool of that exact name (``mcp__srv`` covers ``mcp__srv__*``)
==========  ==============================================
"""

from __future__ import annotations

import os
import re
from typing import Final, Literal

from pydantic import BaseModel, ConfigDict

__all__ = [
    "PATH_TOOLS",
    "InvalidRule",
    "PermissionRule",
    "glob_to_regex",
    "parse_rule",
    "parse_rules",
]

RuleKind = Literal["bash", "path", "name"]

_ALIASES: Final[dict[str, tuple[RuleKind, frozenset[str]]]] = {
    "Bash": ("bash", frozenset({"bash"})),
    "bash": ("bash", frozenset({"bash"})),
    "Read": ("path", frozenset({"read_file", "list_dir", "glob", "grep"})),
    "Edit": ("path", frozenset({"write_file", "edit_file"})),
    "Write": ("path", frozenset({"write_file", "edit_file"})),
    "Glob": ("path", frozenset({"glob"})),
    "Grep": ("path", frozenset({"grep"})),
    "LS": ("path", frozenset({"list_dir"})),
    "read_file": ("path", frozenset({"read_file"})),
    "write_file": ("path", frozenset({"write_file"})),
    "edit_file": ("path", frozenset({"edit_file"})),
    "list_dir": ("path", frozenset({"list_dir"})),
    "glob": ("path", frozenset({"glob"})),
    "grep": ("path", frozenset({"grep"})),
}
#: Built-in tools whose rules take a path pattern.
PATH_TOOLS: Final[frozenset[str]] = frozenset(
    {"read_file", "write_file", "edit_file", "list_dir", "glob", "grep"}
)

_RULE: Final = re.compile(r"^(?P<name>[A-Za-z][A-Za-z0-9_\-]{0,127})(?:\((?P<pattern>.*)\))?$", re.DOTALL)
_MAX_RULE: Final = 1024


class InvalidRule(ValueError):
    """A rule of settings.json that does not follow the grammar."""

    def __init__(self, rule: object, problem: str) -> None:
        super().__init__(f"invalid permission rule {rule!r}: {problem}")
        self.rule = rule
        self.problem = problem


class PermissionRule(BaseModel):
    """One parsed rule. ``pattern`` is ``None`` for a bare tool name (matches every call)."""

    model_config = ConfigDict(frozen=True)

    raw: str
    name: str
    kind: RuleKind
    tools: frozenset[str] = frozenset()
    pattern: str | None = None
    #: Bash only: the words of the pattern and whether more words may follow (``:*``).
    words: tuple[str, ...] = ()
    prefix: bool = False

    def covers_tool(self, tool: str) -> bool:
        """Whether this rule is about ``tool`` at all (ignoring its pattern)."""
        if self.kind != "name":
            return tool in self.tools
        if tool == self.name:
            return True
        # mcp__server covers every tool of that server
        return (
            self.name.startswith("mcp__") and self.name.count("__") == 1 and tool.startswith(self.name + "__")
        )

    # -- matching -------------------------------------------------------------

    def matches_command(self, argv: tuple[str, ...], *, loose: bool = False) -> bool:
        """Bash: whether the command words ``argv`` match.

        ``loose`` (for deny and ask rules) also compares the program's
        basename, so ``/bin/rm -rf x`` meets ``Bash(rm -rf:*)``; allow rules
        compare the program word exactly (``./git`` is not ``git``).
        """
        if self.kind != "bash":
            return False
        if self.pattern is None:
            return True
        if not argv:
            return False
        if loose:
            argv = (os.path.basename(argv[0]), *argv[1:])
        n = len(self.words)
        if self.prefix:
            return argv[:n] == self.words
        return argv == self.words

    def matches_path(self, path: str, *, root: str, home: str) -> bool:
        """Path tools: whether the resolved absolute ``path`` matches the pattern."""
        if self.kind != "path":
            return False
        if self.pattern is None:
            return True
        return _compiled_path_regex(self.pattern, root, home).match(path) is not None


def glob_to_regex(pattern: str) -> str:
    """A path glob as a regex: ``**`` any number of components, ``*`` and ``?`` within one."""
    out: list[str] = []
    i = 0
    while i < len(pattern):
        ch = pattern[i]
        if pattern.startswith("**/", i):
            out.append(r"(?:[^/]*/)*")
            i += 3
        elif pattern.startswith("**", i):
            out.append(r".*")
            i += 2
        elif ch == "*":
            out.append(r"[^/]*")
            i += 1
        elif ch == "?":
            out.append(r"[^/]")
            i += 1
        else:
            out.append(re.escape(ch))
            i += 1
    return "".join(out)


_REGEX_CACHE: dict[tuple[str, str, str], re.Pattern[str]] = {}


def _anchor(pattern: str, root: str, home: str) -> str:
    if pattern == "~" or pattern.startswith("~/"):
        return home.rstrip("/") + pattern[1:]
    if pattern.startswith("/"):
        return pattern
    return root.rstrip("/") + "/" + pattern


def _compiled_path_regex(pattern: str, root: str, home: str) -> re.Pattern[str]:
    key = (pattern, root, home)
    rx = _REGEX_CACHE.get(key)
    if rx is None:
        anchored = _anchor(pattern, root, home)
        # "dir/" and "dir/**" both mean everything below dir (and dir itself)
        body = glob_to_regex(anchored.rstrip("/"))
        if anchored.endswith("/"):
            body += r"(?:/.*)?"
        elif anchored.endswith("/**"):
            body = glob_to_regex(anchored[: -len("/**")]) + r"(?:/.*)?"
        rx = re.compile(rf"^{body}$", re.DOTALL)
        if len(_REGEX_CACHE) < 4096:
            _REGEX_CACHE[key] = rx
    return rx


def _split_words(text: str, raw: str) -> tuple[str, ...]:
    # A pattern is trusted configuration: plain whitespace separates its words.
    if any(c in text for c in "'\"\\`$;&|<>(){}\n"):
        raise InvalidRule(raw, "a Bash pattern is plain words (no quotes, $, ;, &, |, redirections)")
    return tuple(text.split())


def parse_rule(raw: object) -> PermissionRule:
    """Parse one rule; raise :class:`InvalidRule` naming the problem."""
    if not isinstance(raw, str):
        raise InvalidRule(raw, f"a rule is a string, got {type(raw).__name__}")
    text = raw.strip()
    if not text:
        raise InvalidRule(raw, "empty rule")
    if len(text) > _MAX_RULE:
        raise InvalidRule(raw[:64] + "…", f"longer than {_MAX_RULE} characters")
    m = _RULE.match(text)
    if m is None:
        if "(" in text and not text.endswith(")"):
            raise InvalidRule(raw, "unbalanced parentheses: expected Tool(pattern)")
        raise InvalidRule(raw, "expected Tool or Tool(pattern), e.g. Bash(git:*), Read, Edit(src/**)")
    name = m.group("name")
    pattern = m.group("pattern")
    if pattern is not None and ("(" in pattern or ")" in pattern):
        raise InvalidRule(raw, "parentheses inside the pattern")
    alias = _ALIASES.get(name)
    if alias is None:
        if pattern is not None:
            raise InvalidRule(raw, f"{name} takes no pattern (only Bash and the file tools do)")
        if "__" in name and not name.startswith("mcp__"):
            raise InvalidRule(raw, "only MCP tool names (mcp__server__tool) contain '__'")
        return PermissionRule(raw=text, name=name, kind="name")
    kind, tools = alias
    if pattern is None:
        return PermissionRule(raw=text, name=name, kind=kind, tools=tools)
    pattern = pattern.strip()
    if pattern == "":
        raise InvalidRule(raw, "empty pattern; write the bare tool name to match everything")
    if kind == "bash":
        if pattern == "*":
            return PermissionRule(raw=text, name=name, kind=kind, tools=tools)
        prefix = pattern.endswith(":*")
        body = pattern[:-2] if prefix else pattern
        if ":*" in body or body.endswith(":"):
            raise InvalidRule(raw, "':*' may only end the pattern (Bash(git:*))")
        if "*" in body:
            raise InvalidRule(raw, "'*' is only allowed as the ':*' suffix (Bash(npm run:*))")
        words = _split_words(body, text)
        if not words:
            raise InvalidRule(raw, "no command before ':*'")
        return PermissionRule(
            raw=text, name=name, kind=kind, tools=tools, pattern=pattern, words=words, prefix=prefix
        )
    # path pattern
    if any(ord(c) < 32 for c in pattern):
        raise InvalidRule(raw, "control characters in the path pattern")
    if pattern.startswith("~") and not (pattern == "~" or pattern.startswith("~/")):
        raise InvalidRule(raw, "only ~/ (the current user's home) is supported")
    if "[" in pattern or "]" in pattern or "{" in pattern:
        raise InvalidRule(raw, "only *, ** and ? are supported in path patterns")
    return PermissionRule(raw=text, name=name, kind=kind, tools=tools, pattern=pattern)


def parse_rules(raws: list[str] | tuple[str, ...], *, what: str) -> tuple[PermissionRule, ...]:
    """Parse a list of rules; one :class:`InvalidRule` names every bad entry of ``what``."""
    out: list[PermissionRule] = []
    problems: list[str] = []
    for raw in raws:
        try:
            out.append(parse_rule(raw))
        except InvalidRule as exc:
            problems.append(str(exc))
    if problems:
        raise InvalidRule(what, "; ".join(problems))
    return tuple(out)
