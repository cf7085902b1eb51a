"""Skill invocation and workflow runs against in-memory ports (the same AssetRuntime the service uses)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from jidocode.services.asset_loader.discover import SourceFile
from jidocode.services.asset_loader.generation import Generation, compile_generation
from jidocode.services.asset_loader.hooks import HookSignal
from jidocode.services.asset_loader.runtime import AssetRuntime, resolve_refs, skill_allows
from jidocode.services.asset_loader.tools import call_asset_tool, tool_specs
from jidocode.shared.errors import InvalidInput, NotFound
from jidocode.shared.events import EventModel
from jidocode.shared.events.tools import RunTool, ToolCallMeta, ToolResult, ToolResultError
from jidocode.shared.settings import HookSettings, HooksSettings, LoadedSettings, Settings


class Ports:
    """Tool runner and signal doubles: record calls, answer from a table."""

    def __init__(self, fail: set[str] | None = None) -> None:
        self.calls: list[tuple[str, dict[str, Any], str]] = []
        self.events: list[EventModel] = []
        self.hooks: list[HookSignal] = []
        self.fail = fail or set()

    async def run(self, name: str, args: dict[str, Any], meta: ToolCallMeta) -> ToolResult:
        self.calls.append((name, args, meta.request_id))
        if name in self.fail:
            return ToolResult(ok=False, error=ToolResultError(type="boom", message=f"{name} failed"))
        return ToolResult(ok=True, data={"tool": name, "args": args})

    async def signal(self, event: EventModel) -> None:
        self.events.append(event)

    async def hook(self, hook: HookSignal) -> None:
        self.hooks.append(hook)


SKILL = b"""---
name: lint
description: Lint things
allowed-tools: Read, Bash(ruff:*)
jido:
  actions:
    - {name: Ruff, tool: bash, args: {command: "ruff check {{path}}"}}
    - {name: Peek, tool: read_file}
    - {name: Rm, tool: bash, args: {command: "rm -rf {{path}}"}}
    - {name: Script, tool: bash, args: {command: "ruff {{skill_dir}}/scripts"}}
  router: {lint/run: Ruff, lint/peek: Peek, lint/rm: Rm, lint/script: Script}
---
"""

FLOW = b"""inputs: {path: {required: true}, extra: {default: 3}}
steps:
  - id: peek
    skill: lint
    route: lint/peek
    args: {path: "{{inputs.path}}"}
  - id: show
    command: say
    args: ["{{steps.peek.output.tool}}"]
  - id: raw
    tool: grep
    args: {pattern: x, n: "{{inputs.extra}}", msg: "n={{inputs.extra}}"}
  - id: sub
    workflow: leaf
    args: {v: "{{steps.raw.output.args.n}}"}
outputs: {said: "{{steps.show.output.prompt}}", leaf: "{{steps.sub.output.outputs.v}}"}
"""


def _gen(
    tmp_path: Path, hooks: HooksSettings | None = None, extra: list[SourceFile] | None = None
) -> Generation:
    src = [
        SourceFile(kind="skill", layer="project", path="/p/skills/lint/SKILL.md", stem="lint", raw=SKILL),
        SourceFile(kind="command", layer="project", path="/p/commands/say.md", stem="say", raw=b"Say $1"),
        SourceFile(kind="workflow", layer="project", path="/p/workflows/flow.yaml", stem="flow", raw=FLOW),
        SourceFile(
            kind="workflow",
            layer="project",
            path="/p/workflows/leaf.yaml",
            stem="leaf",
            raw=b"steps: [{tool: list_dir}]\noutputs: {v: '{{inputs.v}}'}\ninputs: [v]\n",
        ),
        SourceFile(
            kind="workflow",
            layer="project",
            path="/p/workflows/brittle.yaml",
            stem="brittle",
            raw=b"steps: [{tool: glob, continue_on_error: true}, {tool: grep}, {tool: list_dir}]",
        ),
        *(extra or []),
    ]
    settings = Settings(hooks=hooks or HooksSettings())
    gen = compile_generation(src, LoadedSettings(settings=settings))
    assert [d for d in gen.diagnostics if d.severity == "error"] == []
    return gen


META = ToolCallMeta(request_id="req", conversation_id="c")


async def test_invoke_skill_fills_args_and_emits_hooks(tmp_path: Path) -> None:
    hooks = HooksSettings(
        pre=HookSettings(signal_type="skill/pre"), post=HookSettings(signal_type="skill/post")
    )
    gen, ports = _gen(tmp_path, hooks), Ports()
    rt = AssetRuntime("p1", str(tmp_path), ports, ports)
    result = await rt.invoke_skill(gen, "lint", "lint/run", {"path": "src"}, META)
    assert result.ok
    assert ports.calls == [("bash", {"command": "ruff check src"}, "req/skill/lint/lint/run")]
    assert [(h.signal_type, h.data.get("status")) for h in ports.hooks] == [
        ("skill/pre", None),
        ("skill/post", "ok"),
    ]


async def test_skill_dir_param(tmp_path: Path) -> None:
    gen, ports = _gen(tmp_path), Ports()
    await AssetRuntime("p1", "/p", ports, ports).invoke_skill(gen, "lint", "lint/script", {}, META)
    await AssetRuntime("p1", "/elsewhere", ports, ports).invoke_skill(gen, "lint", "lint/script", {}, META)
    assert [c[1]["command"] for c in ports.calls] == [
        "ruff skills/lint/scripts",
        "ruff /p/skills/lint/scripts",
    ]


async def test_invoke_skill_denied_by_allowed_tools(tmp_path: Path) -> None:
    hooks = HooksSettings(post=HookSettings(signal_type="skill/post"))
    gen, ports = _gen(tmp_path, hooks), Ports()
    rt = AssetRuntime("p1", str(tmp_path), ports, ports)
    result = await rt.invoke_skill(gen, "lint", "lint/rm", {"path": "src"}, META)
    assert not result.ok and result.error is not None and result.error.type == "permission_denied"
    assert ports.calls == []
    assert ports.hooks[-1].data["status"] == "error"


async def test_invoke_skill_unknown(tmp_path: Path) -> None:
    gen, ports = _gen(tmp_path), Ports()
    rt = AssetRuntime("p1", str(tmp_path), ports, ports)
    with pytest.raises(NotFound):
        await rt.invoke_skill(gen, "nope", "x", {}, META)
    with pytest.raises(NotFound, match="no route"):
        await rt.invoke_skill(gen, "lint", "lint/nope", {}, META)
    assert ports.hooks == []


async def test_tool_failure_gives_error_status(tmp_path: Path) -> None:
    hooks = HooksSettings(post=HookSettings(signal_type="skill/post"))
    gen, ports = _gen(tmp_path, hooks), Ports(fail={"read_file"})
    rt = AssetRuntime("p1", str(tmp_path), ports, ports)
    result = await rt.invoke_skill(gen, "lint", "lint/peek", {"path": "a"}, META)
    assert not result.ok and ports.hooks[-1].data["status"] == "error"


def test_skill_allows(tmp_path: Path) -> None:
    gen = _gen(tmp_path)
    skill = gen.skills["lint"]
    assert skill_allows(skill, str(tmp_path), "read_file", {"path": "a.py"})[0]
    assert skill_allows(skill, str(tmp_path), "bash", {"command": "ruff check ."})[0]
    assert not skill_allows(skill, str(tmp_path), "bash", {"command": "ruff check .; rm -rf /"})[0]
    assert not skill_allows(skill, str(tmp_path), "write_file", {"path": "a"})[0]
    open_skill = skill.model_copy(update={"allowed_tools": []})
    assert skill_allows(open_skill, str(tmp_path), "write_file", {"path": "a"})[0]
    bad = skill.model_copy(update={"allowed_tools": ["Bash(:*"]})
    assert not skill_allows(bad, str(tmp_path), "bash", {"command": "ls"})[0]


async def test_workflow_run(tmp_path: Path) -> None:
    gen, ports = _gen(tmp_path), Ports()
    rt = AssetRuntime("p1", str(tmp_path), ports, ports)
    result = await rt.run_workflow(gen, "flow", {"path": "src"}, META)
    assert result.ok, result
    assert result.data["outputs"] == {"said": "Say read_file", "leaf": 3}
    names = [c[0] for c in ports.calls]
    assert names == ["read_file", "grep", "list_dir"]
    assert ports.calls[1][1] == {"pattern": "x", "n": 3, "msg": "n=3"}  # whole refs keep their type
    types = [e.type for e in ports.events]
    assert types[0] == "workflow.run.started" and types[-1] == "workflow.run.completed"
    assert types.count("workflow.run.step") == 4 + 1  # 4 steps + the sub-workflow's one
    assert types.count("workflow.run.started") == 2
    run_ids = {e.run_id for e in ports.events}
    assert len(run_ids) == 2
    assert all("/wf/" in c[2] for c in ports.calls)  # nested request ids stay unique per step


async def test_workflow_failure_and_continue_on_error(tmp_path: Path) -> None:
    gen, ports = _gen(tmp_path), Ports(fail={"glob", "grep"})
    rt = AssetRuntime("p1", str(tmp_path), ports, ports)
    result = await rt.run_workflow(gen, "brittle", {}, META)
    assert not result.ok and result.error is not None and "step2" in result.error.message
    assert [c[0] for c in ports.calls] == ["glob", "grep"]  # stopped before list_dir
    failed = ports.events[-1]
    assert failed.type == "workflow.run.failed" and failed.step == "step2"


async def test_workflow_inputs_checked(tmp_path: Path) -> None:
    gen, ports = _gen(tmp_path), Ports()
    rt = AssetRuntime("p1", str(tmp_path), ports, ports)
    with pytest.raises(InvalidInput, match="needs input"):
        await rt.run_workflow(gen, "flow", {}, META)
    with pytest.raises(InvalidInput, match="no input"):
        await rt.run_workflow(gen, "flow", {"path": "a", "zzz": 1}, META)
    with pytest.raises(NotFound):
        await rt.run_workflow(gen, "ghost", {}, META)
    assert ports.events == []


async def test_deep_nesting_limited(tmp_path: Path) -> None:
    chain = [
        SourceFile(
            kind="workflow",
            layer="project",
            path=f"/p/workflows/w{i}.yaml",
            stem=f"w{i}",
            raw=f"steps: [{{workflow: w{i + 1}}}]".encode(),
        )
        for i in range(10)
    ]
    chain.append(
        SourceFile(
            kind="workflow",
            layer="project",
            path="/p/workflows/w10.yaml",
            stem="w10",
            raw=b"steps: [{tool: x}]",
        )
    )
    gen, ports = _gen(tmp_path, extra=chain), Ports()
    rt = AssetRuntime("p1", str(tmp_path), ports, ports)
    result = await rt.run_workflow(gen, "w0", {}, META)
    assert not result.ok and ports.calls == []


def test_resolve_refs() -> None:
    ctx = {"inputs": {"a": [1, 2]}, "steps": {"s": {"output": {"k": "v"}}}}
    assert resolve_refs("{{inputs.a}}", ctx) == [1, 2]
    assert resolve_refs("x {{inputs.a}} {{steps.s.output.k}} {{steps.s.output.zz}}", ctx) == "x [1, 2] v "
    assert resolve_refs({"l": ["{{inputs.a.1}}"]}, ctx) == {"l": [2]}


async def test_asset_tools(tmp_path: Path) -> None:
    gen, ports = _gen(tmp_path), Ports()
    rt = AssetRuntime("p1", str(tmp_path), ports, ports)
    specs = {s["name"]: s for s in tool_specs(gen)}
    assert set(specs) == {"run_command", "run_workflow", "query_skill_graph", "load_skill", "invoke_skill"}
    assert "lint:lint/run" in specs["invoke_skill"]["description"]

    async def call(tool: str, **args: Any) -> ToolResult:
        return await call_asset_tool(gen, rt, RunTool(name=tool, args=args, meta=META))

    assert (await call("run_command", name="say", arguments="hi")).data["prompt"] == "Say hi"
    assert (await call("load_skill", name="lint")).data["routes"] == [
        "lint/run",
        "lint/peek",
        "lint/rm",
        "lint/script",
    ]
    assert (await call("invoke_skill", skill="lint", route="lint/peek", params={"path": "a"})).ok
    assert (await call("run_workflow", name="leaf", inputs={"v": 1})).data["outputs"] == {"v": 1}
    assert (await call("query_skill_graph", op="nodes")).data == []
    for bad in (
        await call("run_command", name="nope"),
        await call("load_skill"),
        await call("invoke_skill", skill="lint", route="lint/peek", params=[1]),
        await call("query_skill_graph", op="neighbours", node="ghost"),
        await call("query_skill_graph", op="nodes", limit=0),
        await call("no_such_tool"),
        await call("run_workflow", name="leaf", inputs="x"),
    ):
        assert not bad.ok and bad.error is not None and bad.error.type in ("not_found", "invalid_input")
