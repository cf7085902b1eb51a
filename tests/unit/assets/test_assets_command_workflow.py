"""Commands (templating) and workflows (compilation, references, cycles)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jidocode.services.asset_loader.loaders.command import parse_command, render_command
from jidocode.services.asset_loader.loaders.workflow import find_cycles, parse_workflow
from jidocode.shared.errors import InvalidInput

REVIEW = """---
description: Review a file
arguments:
  - {name: file, required: true}
  - {name: focus, default: bugs}
allowed-tools: Read Grep
model: openai/gpt-4.1
argument-hint: <file> [focus]
---
Review {{file}} looking for {{focus}}. All: $ARGUMENTS. First: $1, third: $3. Keep {{unknown}}.
"""


def _cmd(text: str, stem: str = "review"):  # type: ignore[no-untyped-def]
    return parse_command(text.encode(), path=f"/l/commands/{stem}.md", stem=stem, layer="project")


def test_command_parse_and_render() -> None:
    cmd, diags = _cmd(REVIEW)
    assert diags == [] and cmd is not None
    assert cmd.name == "review" and cmd.model == "openai/gpt-4.1" and cmd.allowed_tools == ["Read", "Grep"]
    assert [a.name for a in cmd.arguments] == ["file", "focus"] and cmd.argument_hint == "<file> [focus]"
    assert render_command(cmd, "src/a.py") == (
        "Review src/a.py looking for bugs. All: src/a.py. First: src/a.py, third: . Keep {{unknown}}.\n"
    )
    assert render_command(cmd, '"my file.py" style').startswith("Review my file.py looking for style.")
    assert render_command(cmd, ["x", "perf"]).startswith("Review x looking for perf.")
    assert render_command(cmd, {"file": "y"}).startswith("Review y looking for bugs. All: y.")
    with pytest.raises(InvalidInput, match="file"):
        render_command(cmd, "")


def test_command_defaults() -> None:
    cmd, diags = _cmd("# Explain the code\n\nExplain $ARGUMENTS", stem="explain")
    assert cmd is not None and diags == []
    assert cmd.description == "Explain the code" and cmd.arguments == []
    assert render_command(cmd, "x y").endswith("Explain x y")
    cmd2, _ = _cmd("---\narguments: a b\n---\n{{a}}-{{b}}", stem="two")
    assert cmd2 is not None and render_command(cmd2, "1 2") == "1-2"


@pytest.mark.parametrize(
    ("text", "stem", "key"),
    [
        ("---\nname: other\n---\nx", "review", "name"),
        ("---\nname: 5\n---\nx", "review", "name"),
        ("---\ndescription: [1]\n---\nx", "review", "description"),
        ("x", "Bad_Name", "name"),
    ],
)
def test_command_rejected(text: str, stem: str, key: str) -> None:
    cmd, diags = _cmd(text, stem)
    assert cmd is None and diags[0].key == key


def test_command_argument_problems() -> None:
    cmd, diags = _cmd("---\narguments: [{name: a}, {name: a}, 3, {x: 1}]\n---\nx", "c")
    assert cmd is not None and [a.name for a in cmd.arguments] == ["a"]
    assert len(diags) == 3


@given(st.text(max_size=200), st.text(max_size=50))
@settings(max_examples=200, deadline=None)
def test_render_never_crashes(template: str, args: str) -> None:
    cmd, _ = _cmd(f"---\narguments: [a]\n---\n{template}", "c")
    if cmd is not None:
        render_command(cmd, args or "x")


WF = """---
name: release
description: Cut a release
inputs:
  version: {required: true}
  dry: false
steps:
  - id: test
    tool: bash
    args: {command: "pytest -q"}
  - id: notes
    command: changelog
    args: "{{inputs.version}}"
  - id: text
    skill: pdf-processor
    route: pdf/extract/text
    args: {path: "{{steps.test.output}}", notes: "{{steps.notes.output}}"}
  - workflow: publish
    args: {version: "{{inputs.version}}"}
outputs:
  notes: "{{steps.notes.output}}"
---
Docs here.
"""


def _wf(text: str, stem: str = "release", ext: str = "md"):  # type: ignore[no-untyped-def]
    return parse_workflow(text.encode(), path=f"/l/workflows/{stem}.{ext}", stem=stem, layer="project")


def test_workflow_markdown() -> None:
    wf, diags = _wf(WF)
    assert diags == [] and wf is not None
    assert [s.kind for s in wf.steps] == ["tool", "command", "skill", "workflow"]
    assert wf.steps[3].id == "step4" and wf.steps[2].needs == ["test", "notes"]
    assert wf.inputs[0].required and wf.inputs[1].default is False
    assert wf.sub_workflows == ["publish"] and wf.body == "Docs here.\n"
    assert wf.outputs == {"notes": "{{steps.notes.output}}"}


def test_workflow_yaml() -> None:
    wf, diags = _wf("steps:\n  - tool: read_file\n    with: {path: a}\n", stem="one", ext="yaml")
    assert diags == [] and wf is not None and wf.name == "one" and wf.steps[0].args == {"path": "a"}


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("steps: []", "non-empty"),
        ("steps: [{tool: a, command: b}]", "exactly one"),
        ("steps: [{id: a, tool: x}, {id: a, tool: y}]", "repeated"),
        ("steps: [{skill: s}]", "route"),
        ("steps: [{tool: x, args: '{{steps.later.output}}'}, {id: later, tool: y}]", "earlier step"),
        ("steps: [{tool: x, args: '{{inputs.nope}}'}]", "undeclared input"),
        ("outputs: {a: '{{steps.z}}'}\nsteps: [{tool: x}]", "earlier step"),
        ("- 1", "mapping"),
        ("name: other\nsteps: [{tool: x}]", "does not match"),
        ("steps: [3]", "mapping"),
    ],
)
def test_workflow_rejected(text: str, fragment: str) -> None:
    wf, diags = _wf(text, stem="w", ext="yaml")
    assert wf is None
    assert any(fragment in d.problem for d in diags), diags


def test_cycles() -> None:
    def mk(name: str, subs: list[str]):  # type: ignore[no-untyped-def]
        steps = "".join(f"\n  - workflow: {s}" for s in subs) or "\n  - tool: x"
        wf, _ = _wf(f"steps:{steps}", stem=name, ext="yaml")
        assert wf is not None
        return wf

    flows = {
        "a": mk("a", ["b"]),
        "b": mk("b", ["c"]),
        "c": mk("c", ["a"]),
        "d": mk("d", ["a"]),
        "e": mk("e", ["e"]),
    }
    cycles = find_cycles(flows)
    assert set(cycles) == {"a", "b", "c", "e"}
    assert cycles["a"] == ["a", "b", "c", "a"] and cycles["e"] == ["e", "e"]


@given(st.binary(max_size=300))
@settings(max_examples=200, deadline=None)
def test_workflow_never_crashes(raw: bytes) -> None:
    parse_workflow(raw, path="/l/workflows/w.yaml", stem="w", layer="project")
    parse_workflow(raw, path="/l/workflows/w.md", stem="w", layer="project")


@given(st.binary(max_size=300))
@settings(max_examples=200, deadline=None)
def test_command_never_crashes_on_bytes(raw: bytes) -> None:
    cmd, _ = parse_command(raw, path="/l/commands/c.md", stem="c", layer="project")
    if cmd is not None:
        render_command(cmd, "a b")
