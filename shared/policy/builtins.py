"""The policy's tables of the built-in tools, derived from their declarations.

Every fact comes from :data:`jidocode.shared.tools.specs.BUILTIN_SPECS` (one declaration per
tool): which tools take a path and in which mode, which read and which write, and the names a
permission rule may give them. Nothing here names a tool.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final, Literal

from jidocode.shared.tools.specs import BUILTIN_SPECS, BuiltinSpec

from .paths import Access

__all__ = [
    "NETWORK_TOOLS",
    "PATH_ARGS",
    "PATH_TOOLS",
    "READ_TOOLS",
    "RULE_NAMES",
    "WRITE_TOOLS",
    "RuleKind",
    "permission_of",
]

RuleKind = Literal["bash", "path", "name", "domain"]

#: Permission names that stand for another (``Write(x)`` is ``Edit(x)``, as in Claude Code).
_SYNONYMS: Final[Mapping[str, str]] = {"Write": "Edit"}


def _path_access(spec: BuiltinSpec) -> Access:
    return "write" if spec.access == "write" else "read"


#: The path argument of each built-in file tool, its default and its access mode.
PATH_ARGS: Final[dict[str, tuple[str, str | None, Access]]] = {
    t.name: (t.path_arg.name, t.path_arg.default, _path_access(t)) for t in BUILTIN_SPECS if t.path_arg
}
#: Built-in tools whose rules take a path pattern.
PATH_TOOLS: Final[frozenset[str]] = frozenset(PATH_ARGS)
#: The file tools that only read, and those that change files.
READ_TOOLS: Final[tuple[str, ...]] = tuple(t for t, (_, _, a) in PATH_ARGS.items() if a == "read")
WRITE_TOOLS: Final[tuple[str, ...]] = tuple(t for t, (_, _, a) in PATH_ARGS.items() if a == "write")


#: Built-in tools that reach the network: decided by the host of their URL (``WebFetch`` rules).
NETWORK_TOOLS: Final[frozenset[str]] = frozenset(t.name for t in BUILTIN_SPECS if t.network)


def _kind(spec: BuiltinSpec) -> RuleKind:
    if spec.network:
        return "domain"
    return "path" if spec.path_arg else "bash" if spec.access == "run" else "name"


def _rule_names() -> dict[str, tuple[RuleKind, frozenset[str]]]:
    """Each name a rule may give built-in tools: the tools it covers and how its pattern reads."""
    groups: dict[str, list[BuiltinSpec]] = {}
    for spec in BUILTIN_SPECS:
        groups.setdefault(spec.permission, []).append(spec)
    names: dict[str, tuple[RuleKind, frozenset[str]]] = {}
    for permission, specs in groups.items():
        names[permission] = (_kind(specs[0]), frozenset(s.name for s in specs))
    for synonym, permission in _SYNONYMS.items():
        names[synonym] = names[permission]
    for spec in BUILTIN_SPECS:
        for name in (*spec.rule_names, spec.name):
            names[name] = (_kind(spec), frozenset({spec.name}))
    return names


#: Rule name -> (how its pattern reads, the built-in tools it covers).
RULE_NAMES: Final[Mapping[str, tuple[RuleKind, frozenset[str]]]] = _rule_names()

_PERMISSION: Final[Mapping[str, str]] = {t.name: t.permission for t in BUILTIN_SPECS}


def permission_of(tool: str) -> str | None:
    """The permission name of a built-in tool (``Read``, ``Edit``, ``Bash``); ``None`` for others."""
    return _PERMISSION.get(tool)
