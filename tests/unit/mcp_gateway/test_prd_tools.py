"""The PRD tools' pure parts: each decided by the project's policy by its name, trust in the hint."""

from __future__ import annotations

from pathlib import Path

from jidocode.services.mcp_gateway.prd_tools import PRD_TOOL_NAMES, policy_of, prd_decision
from jidocode.shared.events.tools import ToolPolicy
from jidocode.shared.policy import Effect, tool_exposed


def _summary(root: Path, **rules: object) -> ToolPolicy:
    return ToolPolicy(project_id="p1", root=str(root), **rules)  # type: ignore[arg-type]


def test_each_prd_tool_is_decided_by_its_name(tmp_path: Path) -> None:
    policy = policy_of(
        _summary(tmp_path, allow=["Read", "prd_list", "prd_run"], ask=["prd_pause"], deny=["prd_run"]),
        trusted=True,
    )
    decided = {name: prd_decision(policy, name) for name in sorted(PRD_TOOL_NAMES)}
    assert decided["prd_list"].effect is Effect.ALLOW and decided["prd_list"].rule == "prd_list"
    assert decided["prd_run"].effect is Effect.DENY  # deny beats allow
    assert decided["prd_pause"].effect is Effect.ASK and decided["prd_pause"].rule == "prd_pause"
    status = decided["prd_status"]  # "Read" covers the file tools, not this one
    assert status.effect is Effect.DENY and 'add "prd_status" to permissions.allow' in status.reason
    assert [n for n in sorted(PRD_TOOL_NAMES) if tool_exposed(policy, n)] == ["prd_list", "prd_pause"]


def test_an_untrusted_projects_refusal_names_the_trust_command(tmp_path: Path) -> None:
    policy = policy_of(_summary(tmp_path, allow=["Read"]), trusted=False)
    refused = prd_decision(policy, "prd_list")
    assert refused.effect is Effect.DENY
    assert f"jidocode projects trust {tmp_path}" in refused.reason
    asking = policy_of(_summary(tmp_path, default="ask"), trusted=True)
    assert prd_decision(asking, "prd_run").effect is Effect.ASK and tool_exposed(asking, "prd_run")
