"""One use of one path by a bash command, judged: deny rules, the sandbox's rules, ask rules (pure but for the file system).

:func:`judge_path` is the per-path step of :func:`jidocode.shared.policy.commands.bash_decision`:
the path as written and as resolved is matched against the deny rules of the tools its use
stands for (a recursive read also against what lies below it), then the sandbox's protected,
outside-the-root and sensitive checks, then the ask rules.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Final

from .builtins import READ_TOOLS, WRITE_TOOLS
from .model import Decision, Effect, Policy
from .paths import is_within
from .rules import PermissionRule

__all__ = ["MAX_TREE_ENTRIES", "covers", "judge_path"]

_DEV_OK: Final = frozenset({"/dev/null", "/dev/stdin", "/dev/stdout", "/dev/stderr", "/dev/tty", "/dev/zero"})


def covers(rule: PermissionRule, tools: tuple[str, ...]) -> bool:
    """Whether ``rule`` is a path rule of one of ``tools``."""
    return rule.kind == "path" and any(rule.covers_tool(t) for t in tools)


#: A recursive read is checked against a wildcard rule (``Read(**/.env)``) by walking at most this many entries.
MAX_TREE_ENTRIES: Final = 5000


def _matches_below(rule: PermissionRule, directory: str, root: str, home: str) -> bool:
    """Whether ``rule`` may match something a recursive read of ``directory`` would open.

    When the rule's literal part lies below the directory (``secrets/**`` under
    the root) it may. When the directory lies below it (``**/.env`` and
    ``src``), the tree is walked — bounded; an unfinished walk counts as a match.
    """
    if not rule.may_match_under(directory, root=root, home=home):
        return False
    literal = rule.literal_prefix(root=root, home=home)
    if literal != directory and is_within(literal, directory):
        return True
    budget = MAX_TREE_ENTRIES
    for top, dirs, files in os.walk(directory, followlinks=False):
        for name in (*dirs, *files):
            budget -= 1
            if budget < 0:
                return True
            if rule.matches_path(os.path.join(top, name), root=root, home=home):
                return True
    return False


@dataclass(frozen=True)
class _Use:
    """One use of a path by a command: the path as written and resolved, and how it is used."""

    policy: Policy
    lexical: str
    resolved: str
    kind: str
    label: str

    @property
    def reads(self) -> bool:
        return self.kind in ("read", "read_tree", "mention", "link", "cwd")

    @property
    def writes(self) -> bool:
        return self.kind == "write"

    @property
    def tree(self) -> bool:
        return self.kind in ("read_tree", "link")  # a link to a directory exposes all of it

    def hits(self, rule: PermissionRule) -> bool:
        root, home = self.policy.root, self.policy.home
        candidates = (self.lexical, self.resolved)
        if any(rule.matches_path(p, root=root, home=home, below=True) for p in candidates):
            return True
        return self.tree and any(_matches_below(rule, p, root, home) for p in candidates)

    def covered(self, rule: PermissionRule) -> bool:
        """Whether ``rule`` is of the tools this use stands for (reading or writing files)."""
        return (self.reads and covers(rule, READ_TOOLS)) or (self.writes and covers(rule, WRITE_TOOLS))


def judge_path(
    policy: Policy,
    lexical: str,
    kind: str,
    *,
    label: str,
    reader: bool = False,
    redirect: bool = False,
) -> Decision | None:
    """``None`` when ``kind`` of use of ``lexical`` is fine, else the decision it calls for."""
    if lexical in _DEV_OK or lexical.startswith("/dev/fd/"):
        return None
    use = _Use(policy, lexical, os.path.realpath(lexical), kind, label)
    return _denied_use(use) or _sandbox_use(use, reader=reader, redirect=redirect) or _asked_use(use)


def _denied_use(use: _Use) -> Decision | None:
    """A deny rule of the use's tools matching the path."""
    for r in use.policy.deny:
        if use.covered(r) and use.hits(r):
            verb = "reads" if use.reads else "writes"
            hint = (
                "; name the paths to search outside it, or use the grep/glob tools, which skip denied files"
                if use.tree
                else ""
            )
            return Decision(
                effect=Effect.DENY,
                reason=f"{use.label} {verb} a path denied by rule {r.raw}{hint}",
                rule=r.raw,
            )
    return None


def _sandbox_use(use: _Use, *, reader: bool, redirect: bool) -> Decision | None:
    """What the sandbox says of the path: protected, outside the root, sensitive."""
    sandbox, label, lexical, resolved = use.policy.sandbox, use.label, use.lexical, use.resolved
    protected = sandbox.is_protected(lexical) or sandbox.is_protected(resolved)
    if use.writes and protected:
        return Decision(
            effect=Effect.DENY,
            reason=f"{label} would modify a protected file (runtime settings, MCP config or git internals)",
            details={"sandbox": "protected"},
        )
    if use.kind == "mention" and protected and not reader:
        return Decision(
            effect=Effect.ASK,
            reason=f"{label} names a protected file; not covered by allow rules",
            details={"sandbox": "protected"},
        )
    if sandbox.base_of(resolved) is None and use.kind != "mention":
        return Decision(
            effect=Effect.ASK,
            reason=f"{label} is outside the project root ({resolved}); not covered by allow rules",
            details={"sandbox": "outside_root"},
        )
    if (sandbox.is_sensitive(lexical) or sandbox.is_sensitive(resolved)) and not _explicitly_read(use):
        return Decision(
            effect=Effect.DENY if redirect else Effect.ASK,
            reason=f"{label} is a sensitive file (secrets)",
            details={"sandbox": "sensitive"},
        )
    return None


def _explicitly_read(use: _Use) -> bool:
    """A read the allow rules name with a pattern matching the path (it lifts the sensitive default)."""
    root, home = use.policy.root, use.policy.home
    return use.reads and any(
        r.pattern is not None and covers(r, READ_TOOLS) and r.matches_path(use.resolved, root=root, home=home)
        for r in use.policy.allow
    )


def _asked_use(use: _Use) -> Decision | None:
    """An ask rule matching the path; for a mere mention, a rule denying edits of it asks too."""
    mention = use.kind == "mention"
    for r in use.policy.ask:
        covered = covers(r, (*READ_TOOLS, *WRITE_TOOLS)) if mention else use.covered(r)
        if covered and use.hits(r):
            return Decision(
                effect=Effect.ASK, reason=f"{use.label} needs approval (rule {r.raw})", rule=r.raw
            )
    if mention:
        for r in use.policy.deny:
            if covers(r, WRITE_TOOLS) and use.hits(r):
                return Decision(
                    effect=Effect.ASK,
                    reason=f"{use.label} names a path denied to edits by rule {r.raw}",
                    rule=r.raw,
                )
    return None
