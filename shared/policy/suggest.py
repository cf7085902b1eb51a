"""The allow rule that would let a call through without asking (pure).

When no rule decides a call, its decision names the rule a user would add to
``permissions.allow`` (``Bash(npm test:*)``, ``Edit(src/app.py)``,
``mcp__github__create_issue``), so an ask nobody can answer, or a denial, says
what to write instead of only refusing. A suggestion is a starting point the
user judges: for a command it is the program and its subcommand as a prefix
(``npm test`` → ``Bash(npm test:*)``), otherwise the exact command; for a file
the file itself. Nothing is suggested that would not parse as a rule.
"""

from __future__ import annotations

import os
import re
from typing import Final

from .builtins import permission_of
from .rules import InvalidRule, parse_rule

__all__ = ["bash_rule", "named_rule", "path_rule"]

#: A word that reads as a subcommand (``test``, ``run``, ``status``), not a file or an option.
_SUBCOMMAND: Final = re.compile(r"[a-z][a-z0-9_-]{0,31}")
_GLOB_CHARS: Final = frozenset("*?[]{}()")


def _valid(rule: str) -> str | None:
    try:
        parse_rule(rule)
    except InvalidRule:
        return None
    return rule


def bash_rule(argv: tuple[str, ...]) -> str | None:
    """``Bash(prog sub:*)`` when the second word is a subcommand, else the exact command."""
    if not argv:
        return None
    if len(argv) >= 2 and _SUBCOMMAND.fullmatch(argv[1]):
        return _valid(f"Bash({argv[0]} {argv[1]}:*)")
    return _valid(f"Bash({' '.join(argv)})")


def path_rule(tool: str, path: str | None, root: str) -> str | None:
    """``Edit(rel/path)`` or ``Read(rel/path)`` for a resolved ``path`` inside ``root``."""
    if path is None:
        return None
    rel = os.path.relpath(path, root)
    if rel == "." or rel.startswith("..") or any(c in _GLOB_CHARS for c in rel):
        return None
    return _valid(f"{permission_of(tool) or 'Read'}({rel})")


def named_rule(tool: str) -> str | None:
    """The tool's own name (an MCP tool, a skill's tool)."""
    return _valid(tool)
