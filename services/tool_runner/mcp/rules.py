"""The permission rules of MCP tools (pure): ``mcp__server`` and ``mcp__server__tool``, default ask.

An MCP tool is judged by name only (its arguments mean nothing to the policy): a deny rule
naming it or its server denies, else an ask rule asks, else an allow rule allows. With no rule
at all the call is *asked*, whatever ``permissions.default`` says (a server's tools are code
nobody reviewed for this project: the user says yes once per session, or writes an allow rule).
An MCP tool is in the catalogue unless a deny rule names it (or its server) outright.
"""

from __future__ import annotations

from jidocode.shared.policy import Decision, Effect, Policy

__all__ = ["mcp_decision", "mcp_exposed"]


def mcp_decision(policy: Policy, name: str) -> Decision:
    """The decision on a call of MCP tool ``name`` (``mcp__<server>__<tool>``)."""
    for effect, rules in ((Effect.DENY, policy.deny), (Effect.ASK, policy.ask), (Effect.ALLOW, policy.allow)):
        for rule in rules:
            if rule.pattern is None and rule.covers_tool(name):
                return Decision(effect=effect, reason=f"{effect.value} by rule {rule.raw}", rule=rule.raw)
    return Decision(
        effect=Effect.ASK,
        reason=f"no rule names {name} or its server; MCP tools are asked by default",
    )


def mcp_exposed(policy: Policy, name: str) -> bool:
    """Whether ``name`` is shown in the catalogue (not denied outright)."""
    return not any(rule.pattern is None and rule.covers_tool(name) for rule in policy.deny)
