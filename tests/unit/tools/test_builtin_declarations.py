"""One declaration per built-in tool (``shared/tools/specs.py``), every table derived from it.

The policy's tables, the catalog's specs, the tool runner's read-only set and its runners,
and the names agent templates use must agree with the declarations; each built-in tool has
exactly one; and no module keeps a table of its own naming the tools.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from jidocode.services.conversation.subagents.core import CLAUDE_TOOL_NAMES
from jidocode.services.tool_runner.idempotency import READ_ONLY, needs_claim
from jidocode.services.tool_runner.tools import BUILTINS
from jidocode.shared.events.tools import ToolSpec
from jidocode.shared.policy import Policy, authorize, parse_rule
from jidocode.shared.policy.builtins import PATH_ARGS, PATH_TOOLS, READ_TOOLS, RULE_NAMES, WRITE_TOOLS
from jidocode.shared.policy.suggest import path_rule
from jidocode.shared.tools import BUILTIN_SPECS, builtin_specs
from jidocode.shared.tools.specs import BUILTIN_BY_NAME, BuiltinSpec

ROOT = Path(__file__).resolve().parents[3]
NAMES = [t.name for t in BUILTIN_SPECS]

#: The rule names as they were written by hand before the declarations: the derived table must
#: read every rule exactly as before.
LEGACY_RULE_NAMES = {
    "Bash": ("bash", {"bash"}),
    "bash": ("bash", {"bash"}),
    "Read": ("path", {"read_file", "list_dir", "glob", "grep"}),
    "Edit": ("path", {"write_file", "edit_file"}),
    "Write": ("path", {"write_file", "edit_file"}),
    "Glob": ("path", {"glob"}),
    "Grep": ("path", {"grep"}),
    "LS": ("path", {"list_dir"}),
    **{
        name: ("path", {name})
        for name in ("read_file", "write_file", "edit_file", "list_dir", "glob", "grep")
    },
}


def test_each_builtin_tool_has_exactly_one_declaration_and_one_runner() -> None:
    assert len(NAMES) == len(set(NAMES)) == 8
    assert list(BUILTIN_BY_NAME) == NAMES
    assert set(BUILTINS) == set(NAMES)
    for name, tool in BUILTINS.items():
        assert tool.definition is BUILTIN_BY_NAME[name], f"{name} runs with a copy of its declaration"


@pytest.mark.parametrize("spec", BUILTIN_SPECS, ids=NAMES)
def test_the_policy_tables_follow_the_declaration(spec: BuiltinSpec) -> None:
    if spec.path_arg is None:
        assert spec.name not in PATH_TOOLS and spec.name not in PATH_ARGS
    else:
        assert PATH_ARGS[spec.name] == (spec.path_arg.name, spec.path_arg.default, spec.access)
    assert (spec.name in READ_TOOLS) is (spec.path_arg is not None and spec.access == "read")
    assert (spec.name in WRITE_TOOLS) is (spec.path_arg is not None and spec.access == "write")
    covering = {name for name, (_, tools) in RULE_NAMES.items() if spec.name in tools}
    assert {spec.permission, spec.name, *spec.rule_names} <= covering
    for name in spec.rule_names:
        assert RULE_NAMES[name][1] == {spec.name}
    assert RULE_NAMES[spec.permission][1] == {
        t.name for t in BUILTIN_SPECS if t.permission == spec.permission
    }


#: The names added since: the network rules (``WebFetch(domain:pypi.org)``).
NEW_RULE_NAMES = {"WebFetch": ("domain", {"web_fetch"}), "web_fetch": ("domain", {"web_fetch"})}


def test_the_rule_names_read_every_rule_as_before() -> None:
    derived = {name: (kind, set(tools)) for name, (kind, tools) in RULE_NAMES.items()}
    assert derived == {**LEGACY_RULE_NAMES, **NEW_RULE_NAMES}
    for name, (kind, tools) in LEGACY_RULE_NAMES.items():
        rule = parse_rule(f"{name}(src/**)" if kind == "path" else f"{name}(ls:*)")
        assert (rule.kind, set(rule.tools)) == (kind, tools)


@pytest.mark.parametrize("spec", [t for t in BUILTIN_SPECS if t.path_arg], ids=lambda t: t.name)
def test_a_path_tool_is_judged_and_suggested_by_its_permission(spec: BuiltinSpec, tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("x")
    policy = Policy.build(str(tmp_path), allow=[f"{spec.permission}(a.txt)"])
    args = {"path": "a.txt", "content": "y", "old_string": "x", "new_string": "y", "pattern": "x"}
    decision = authorize(
        policy, spec.name, {k: v for k, v in args.items() if k in spec.input_model.model_fields}
    )
    assert decision.effect.value == "allow", decision.reason
    assert path_rule(spec.name, str(tmp_path / "a.txt"), str(tmp_path)) == f"{spec.permission}(a.txt)"


@pytest.mark.parametrize("spec", BUILTIN_SPECS, ids=NAMES)
def test_the_catalog_spec_is_the_declaration(spec: BuiltinSpec) -> None:
    shown = ToolSpec.model_validate(builtin_specs()[NAMES.index(spec.name)])
    assert shown.name == spec.name and shown.description == spec.description
    assert shown.input_schema == spec.input_model.model_json_schema()
    assert shown.output_schema == spec.output_model.model_json_schema()
    assert shown.safety.permission == spec.permission
    assert shown.safety.read_only is (spec.access == "read")
    assert shown.safety.destructive is (spec.access != "read")
    assert shown.safety.open_world is (spec.access == "run" or spec.network)
    assert shown.safety.idempotent is spec.idempotent


def test_the_runner_and_agent_tables_follow_the_declarations() -> None:
    assert {t.name for t in BUILTIN_SPECS if t.access == "read"} == READ_ONLY
    assert [n for n in NAMES if needs_claim(n)] == [t.name for t in BUILTIN_SPECS if t.access != "read"]
    for spec in BUILTIN_SPECS:
        for name in spec.agent_names:
            assert CLAUDE_TOOL_NAMES[name] == (spec.name,)
    assert {n for names in CLAUDE_TOOL_NAMES.values() for n in names} == {*NAMES, "task"}


#: Where tables of built-in tools used to be written by hand.
_DERIVED = [
    "shared/policy/rules.py",
    "shared/policy/decision.py",
    "shared/policy/commands.py",
    "shared/policy/fallback.py",
    "shared/policy/suggest.py",
    "shared/policy/builtins.py",
    "services/tool_runner/idempotency.py",
    "services/conversation/subagents/core.py",
]


@pytest.mark.parametrize("path", _DERIVED)
def test_no_other_module_names_the_builtin_tools(path: str) -> None:
    source = (ROOT / path).read_text(encoding="utf-8")
    named = {
        n for n in NAMES if n != "bash" and re.search(rf"""["']{n}["']""", source)
    }  # bash: a rule kind too
    assert not named, f"{path} names built-in tools {sorted(named)}: derive it from BUILTIN_SPECS"
