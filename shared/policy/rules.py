"""Permission rules in the ``Tool(pattern)`` form of settings.json (seed 001), pure.

Grammar (anything else is an :class:`InvalidRule`, raised at project start)::

    rule     := name | name "(" pattern ")"
    name     := Bash | Read | Write | Edit | Glob | Grep | LS | a tool name
                ([A-Za-z][A-Za-z0-9_-]*, e.g. read_file, mcp__github__create_issue,
                 mcp__github to mean every tool of that MCP server)
    pattern  := for Bash: "<words>" (the exact command) or "<words>:*" (the
                command starts with these words); for path tools: a glob where
                "**" spans directories and "*" stays within one, anchored as
                below; for WebFetch: "domain:<entry>", an entry as in
                sandbox.allowed_domains (pypi.org, *.npmjs.org, an IP, a CIDR;
                see :mod:`.domains`)

Path pattern anchors (each matches what it says; ``..`` and ``.`` are collapsed):

==============  ==============================================
``x``, ``./x``  relative to the project root
``/abs``        an absolute path
``//abs``       an absolute path too (the form other tools use)
``~/x``, ``~``  relative to the user's home directory
==============  ==============================================

A **deny** or **ask** rule naming a directory also covers everything below it
(``deny: Read(secrets)`` is ``Read(secrets/**)``); an allow rule matches only
what its glob matches.

Which tools a rule name covers:

==========  ==============================================
``Bash``    ``bash``
``Read``    ``read_file``, ``list_dir``, ``glob``, ``grep``
``Edit``    ``write_file``, ``edit_file`` (``Write`` is the same)
``Glob``    ``glob``; ``Grep``: ``grep``; ``LS``: ``list_dir``
``WebFetch``  ``web_fetch``, and every connection through the egress proxy
other       the tool of that exact name (``mcp__srv`` covers ``mcp__srv__*``)
==========  ==============================================
"""

from __future__ import annotations

import os
import posixpath
import re
from typing import Final

from pydantic import BaseModel, ConfigDict

from .builtins import PATH_TOOLS, RULE_NAMES, RuleKind
from .domains import parse_domain_pattern

__all__ = [
    "PATH_TOOLS",
    "InvalidRule",
    "PermissionRule",
    "anchor_pattern",
    "glob_to_regex",
    "parse_rule",
    "parse_rules",
]

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

    def matches_host(self, host: str) -> bool:
        """WebFetch: whether the normalized ``host`` is this rule's domain entry (a bare rule: any)."""
        if self.kind != "domain":
            return False
        return self.pattern is None or parse_domain_pattern(self.pattern).matches_host(host)

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

    def matches_path(self, path: str, *, root: str, home: str, below: bool = False) -> bool:
        """Path tools: whether the absolute ``path`` matches the pattern.

        ``below`` (deny and ask rules): a path below a matching directory
        matches too, so ``Read(secrets)`` covers ``secrets/k``.
        """
        if self.kind != "path":
            return False
        if self.pattern is None:
            return True
        rx = _compiled_path_regex(self.pattern, root, home)
        if rx.match(path) is not None:
            return True
        if below:
            parent = posixpath.dirname(path)
            while parent != path:
                if rx.match(parent) is not None:
                    return True
                path, parent = parent, posixpath.dirname(parent)
        return False

    def literal_prefix(self, *, root: str, home: str) -> str:
        """The leading components of the anchored pattern that hold no wildcard (``/`` at least)."""
        anchored = anchor_pattern(self.pattern or "**", root, home)
        fixed: list[str] = []
        for part in anchored.split("/"):
            if any(c in part for c in "*?"):
                break
            fixed.append(part)
        return ("/".join(fixed) or "/").rstrip("/") or "/"

    def may_match_under(self, directory: str, *, root: str, home: str) -> bool:
        """Whether the pattern could match ``directory``, a directory above it or anything below it.

        Conservative (a recursive read of ``directory`` is judged by it): a
        pattern whose literal leading components lie under ``directory`` may
        match there; so may one whose literal part contains ``directory``.
        """
        if self.kind != "path":
            return False
        if self.pattern is None:
            return True
        literal = self.literal_prefix(root=root, home=home)
        return _within(literal, directory) or _within(directory, literal)


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


def _within(path: str, base: str) -> bool:
    base = base.rstrip("/") or "/"
    return path == base or path.startswith(base if base == "/" else base + "/")


def anchor_pattern(pattern: str, root: str, home: str) -> str:
    """The absolute form of a path pattern (see the anchors in the module doc); a trailing ``/`` is kept."""
    if pattern.startswith("//"):
        anchored = "/" + pattern.lstrip("/")
    elif pattern == "~" or pattern.startswith("~/"):
        anchored = home.rstrip("/") + pattern[1:]
    elif pattern.startswith("/"):
        anchored = pattern
    else:
        anchored = root.rstrip("/") + "/" + pattern
    trailing = anchored.endswith("/") and anchored != "/"
    anchored = posixpath.normpath(anchored)
    if anchored.startswith("//"):
        anchored = "/" + anchored.lstrip("/")
    return anchored + "/" if trailing and anchored != "/" else anchored


def _compiled_path_regex(pattern: str, root: str, home: str) -> re.Pattern[str]:
    key = (pattern, root, home)
    rx = _REGEX_CACHE.get(key)
    if rx is None:
        anchored = anchor_pattern(pattern, root, home)
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


def _split_rule(raw: str) -> tuple[str, str, str | None]:
    """The rule's text, tool name and pattern (``None`` for a bare name), checked for shape."""
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
    pattern = m.group("pattern")
    if pattern is not None and ("(" in pattern or ")" in pattern):
        raise InvalidRule(raw, "parentheses inside the pattern")
    return text, m.group("name"), pattern


def _named_rule(raw: str, text: str, name: str, pattern: str | None) -> PermissionRule:
    """A rule naming a tool that is not built in (an MCP tool, a skill's tool): no pattern."""
    if pattern is not None:
        raise InvalidRule(raw, f"{name} takes no pattern (only Bash and the file tools do)")
    if "__" in name and not name.startswith("mcp__"):
        raise InvalidRule(raw, "only MCP tool names (mcp__server__tool) contain '__'")
    return PermissionRule(raw=text, name=name, kind="name")


def _bash_rule(raw: str, text: str, name: str, tools: frozenset[str], pattern: str) -> PermissionRule:
    if pattern == "*":
        return PermissionRule(raw=text, name=name, kind="bash", tools=tools)
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
        raw=text, name=name, kind="bash", tools=tools, pattern=pattern, words=words, prefix=prefix
    )


def _path_rule(raw: str, text: str, name: str, tools: frozenset[str], pattern: str) -> PermissionRule:
    if any(ord(c) < 32 for c in pattern):
        raise InvalidRule(raw, "control characters in the path pattern")
    if pattern.startswith("~") and not (pattern == "~" or pattern.startswith("~/")):
        raise InvalidRule(raw, "only ~/ (the current user's home) is supported")
    if "[" in pattern or "]" in pattern or "{" in pattern:
        raise InvalidRule(raw, "only *, ** and ? are supported in path patterns")
    return PermissionRule(raw=text, name=name, kind="path", tools=tools, pattern=pattern)


def _domain_rule(raw: str, text: str, name: str, tools: frozenset[str], pattern: str) -> PermissionRule:
    if not pattern.startswith("domain:"):
        raise InvalidRule(raw, f"expected {name}(domain:<host>), e.g. {name}(domain:pypi.org)")
    try:
        entry = parse_domain_pattern(pattern.removeprefix("domain:").strip())
    except ValueError as exc:
        raise InvalidRule(raw, str(exc)) from None
    return PermissionRule(raw=text, name=name, kind="domain", tools=tools, pattern=entry.raw)


def parse_rule(raw: object) -> PermissionRule:
    """Parse one rule; raise :class:`InvalidRule` naming the problem."""
    if not isinstance(raw, str):
        raise InvalidRule(raw, f"a rule is a string, got {type(raw).__name__}")
    text, name, pattern = _split_rule(raw)
    builtin = RULE_NAMES.get(name)
    if builtin is None:
        return _named_rule(raw, text, name, pattern)
    kind, tools = builtin
    if pattern is None:
        return PermissionRule(raw=text, name=name, kind=kind, tools=tools)
    pattern = pattern.strip()
    if pattern == "":
        raise InvalidRule(raw, "empty pattern; write the bare tool name to match everything")
    if kind == "bash":
        return _bash_rule(raw, text, name, tools, pattern)
    if kind == "domain":
        return _domain_rule(raw, text, name, tools, pattern)
    return _path_rule(raw, text, name, tools, pattern)


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
