"""The decision function of the policy, pure (apart from ``realpath`` and, for bash, ``glob``).

``authorize(policy, tool, args) -> Decision``:

1. Tool arguments are checked first: a file tool's path goes through the
   :class:`PathSandbox` (outside the root, sensitive, protected → *deny*).
2. Rules: any matching **deny** rule → *deny*; else any matching **ask**
   rule → *ask*; else a matching **allow** rule → *allow*; else the
   configured ``default`` (*deny* when unset). A deny or ask rule naming a
   directory covers what lies below it.
3. ``bash``: :mod:`.commands` (every command the string runs, judged on its
   own, plus the files its words name; the strictest result wins).

Deny beats ask beats allow throughout. Nothing here reads a tool argument to
widen the policy: the root, the rules and the default come from the project.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from .builtins import NETWORK_TOOLS, PATH_ARGS, PATH_TOOLS
from .commands import bash_decision
from .model import Decision, Effect, Policy
from .network import fetch_decision
from .paths import bad_path_chars
from .suggest import named_rule, path_rule

__all__ = [
    "PATH_ARGS",
    "Decision",
    "Effect",
    "Policy",
    "authorize",
    "filter_tools",
    "tool_exposed",
]

# --- path tools ---------------------------------------------------------------------


def _path_decision(policy: Policy, tool: str, args: Mapping[str, Any]) -> Decision:
    arg, default, access = PATH_ARGS[tool]
    raw = args.get(arg, default)
    if not isinstance(raw, str):
        return Decision(effect=Effect.DENY, reason=f"{tool}: argument {arg!r} must be a string path")
    pre = policy.sandbox.check(raw, access) if not raw or bad_path_chars(raw) else None
    if pre is not None:
        return Decision(effect=Effect.DENY, reason=pre.message, details={"sandbox": pre.reason})
    lexical = policy.sandbox.lexical(raw)
    resolved = os.path.realpath(lexical)
    # An explicit (pattern) allow rule naming the path lifts the sensitive-file default.
    explicit = any(
        r.pattern is not None
        and r.covers_tool(tool)
        and r.matches_path(resolved, root=policy.root, home=policy.home)
        for r in policy.allow
    )
    check = policy.sandbox.check(raw, access, allow_sensitive=explicit)
    if not check.ok:
        return Decision(
            effect=Effect.DENY,
            reason=check.message,
            path=check.path,
            details={"sandbox": check.reason},
        )
    path = check.path
    candidates = {path, lexical}
    for effect, rules in ((Effect.DENY, policy.deny), (Effect.ASK, policy.ask), (Effect.ALLOW, policy.allow)):
        for r in rules:
            if r.covers_tool(tool) and any(
                r.matches_path(p, root=policy.root, home=policy.home, below=effect is not Effect.ALLOW)
                for p in candidates
            ):
                return Decision(
                    effect=effect, reason=f"{effect.value} by rule {r.raw}", rule=r.raw, path=path
                )
    return policy.by_default(f"{tool} on {raw!r}", allow_rule=path_rule(tool, path, policy.root), path=path)


# --- everything else -----------------------------------------------------------------------


def _named_decision(policy: Policy, tool: str) -> Decision:
    for effect, rules in ((Effect.DENY, policy.deny), (Effect.ASK, policy.ask), (Effect.ALLOW, policy.allow)):
        for r in rules:
            if r.covers_tool(tool) and r.pattern is None:
                return Decision(effect=effect, reason=f"{effect.value} by rule {r.raw}", rule=r.raw)
    return policy.by_default(tool, allow_rule=named_rule(tool))


def authorize(policy: Policy, tool: str, args: Mapping[str, Any]) -> Decision:
    """Decide one call. Pure: the same policy, tool and arguments give the same decision."""
    if not isinstance(args, Mapping):
        return Decision(effect=Effect.DENY, reason="arguments must be an object")
    if tool in PATH_TOOLS:
        return _path_decision(policy, tool, args)
    if tool == "bash":
        return bash_decision(policy, args)
    if tool in NETWORK_TOOLS:
        return fetch_decision(policy, args)
    return _named_decision(policy, tool)


def tool_exposed(policy: Policy, tool: str) -> bool:
    """Whether some call of ``tool`` could be allowed or asked (else hide it from the model)."""
    for r in policy.deny:
        if r.covers_tool(tool) and r.pattern is None:
            return False
    if policy.default is Effect.ASK or tool in NETWORK_TOOLS:  # a fetch asks when no rule matches
        return True
    return any(r.covers_tool(tool) for r in (*policy.allow, *policy.ask))


def filter_tools(policy: Policy, specs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The tool specs the model may see: those not denied outright by the policy."""
    return [s for s in specs if isinstance(s.get("name"), str) and tool_exposed(policy, s["name"])]
