"""The asset loader over a real NATS server, with the engine and the tool runner running."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from jidocode.shared import subjects
from jidocode.shared.bus import Bus
from jidocode.shared.clients import AssetsClient, EngineClient, ToolsClient
from jidocode.shared.config import Config
from jidocode.shared.errors import InvalidInput, NotFound
from jidocode.shared.events.assets import GraphQuery
from jidocode.shared.events.tools import ToolCallMeta
from tests.integration.assets.signals import Signals

SKILL = """---
name: notes-reader
description: Read project notes and summarise them.
allowed-tools: Read
jido:
  actions:
    - {name: ReadNote, tool: read_file, args: {path: "{{path}}"}}
    - {name: Shell, tool: bash, args: {command: "echo hi"}}
  router:
    - "notes/read": ReadNote
    - "notes/shell": Shell
  hooks:
    post:
      signal_type: "skill/notes/post"
      data: {skill: "{{skill_name}}", outcome: "{{status}}"}
---
# Notes reader

Reads notes.
"""

SETTINGS = {
    "permissions": {
        "allow": ["Read", "invoke_skill", "run_workflow", "load_skill", "query_skill_graph", "run_command"],
    },
    "hooks": {
        "pre": {"signal_type": "skill/pre", "data_template": {"phase": "pre", "skill": "{{skill_name}}"}},
        "post": {"signal_type": "skill/post"},
    },
}


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


@pytest.fixture
def project_dir(tmp_path: Path) -> Path:
    root = tmp_path / "proj"
    data = root / ".jido"
    _write(root / "NOTES.md", "remember the milk\n")
    _write(data / "settings.json", json.dumps(SETTINGS))
    _write(data / "skills" / "notes-reader" / "SKILL.md", SKILL)
    _write(data / "skills" / "broken" / "SKILL.md", "---\nname: broken\nname: again\n---\n")
    _write(data / "commands" / "summarise.md", "---\narguments: [file]\n---\nSummarise {{file}} ($ARGUMENTS)")
    _write(
        data / "workflows" / "digest.yaml",
        "inputs: {file: {required: true}}\n"
        "steps:\n"
        "  - id: read\n    skill: notes-reader\n    route: notes/read\n    args: {path: '{{inputs.file}}'}\n"
        "  - id: prompt\n    command: summarise\n    args: ['{{inputs.file}}']\n"
        "outputs: {text: '{{steps.read.output}}', prompt: '{{steps.prompt.output.prompt}}'}\n",
    )
    _write(data / "workflows" / "fails.yaml", "steps:\n  - tool: bash\n    args: {command: 'echo nope'}\n")
    _write(data / "skill_graph" / "git.md", "# Git\nSee [[rebase]].")
    _write(data / "skill_graph" / "rebase.md", "# Rebase\nRewrite history.")
    return root


def _meta(rid: str) -> ToolCallMeta:
    return ToolCallMeta(request_id=rid, conversation_id="c1")


async def test_assets_end_to_end(running: Config, bus: Bus, project_dir: Path) -> None:
    signals, hooks = Signals(), Signals()
    await bus.subscribe(subjects.signal_filter(), signals)
    await bus.subscribe(subjects.hook_filter(), hooks)
    await bus.nc.flush()

    engine = EngineClient(bus)
    info = await engine.start_project(str(project_dir))
    pid = info.project_id
    loaded = await signals.wait(lambda e: e.type == "project.assets_reloaded" and e.data["project_id"] == pid)
    assert loaded.data["counts"] == {"skill": 1, "command": 1, "workflow": 2, "graph_node": 2}
    assert any("duplicate key" in d["problem"] for d in loaded.data["diagnostics"])
    registry = await signals.wait(lambda e: e.type == "skill/registry/updated")
    assert registry.data["skills"] == ["notes-reader"] and registry.data["count"] == 1
    # the wire observers rely on: these subjects and CloudEvent types, with the project id
    assert loaded.nats_subject == "jido.sig.project.assets_reloaded" and loaded.project_id == pid
    assert registry.nats_subject == "jido.sig.skill.registry.updated" and registry.project_id == pid
    for name in ("skills", "commands", "workflows", "skill_graph", "state"):
        assert (project_dir / ".jido" / name).is_dir()

    assets = AssetsClient(bus, pid)
    listing = await assets.list("skill")
    assert [s["name"] for s in listing.items] == ["notes-reader"]
    skill = (await assets.get("skill", "notes-reader")).asset
    assert skill["body"].startswith("# Notes reader") and skill["allowed_tools"] == ["Read"]
    hits = await assets.search("sumarise")
    assert hits.items[0]["name"] == "summarise"
    with pytest.raises(NotFound):
        await assets.get("command", "nope")
    diags = await assets.diagnostics()
    assert any(d["file"].endswith("broken/SKILL.md") for d in diags.diagnostics)
    path = await assets.graph(GraphQuery(op="path", node="git", target="rebase"))
    assert path.op == "path" and path.result == ["git", "rebase"]
    assert (await assets.graph(GraphQuery(op="backlinks", node="rebase"))).result == ["git"]
    with pytest.raises(InvalidInput):
        await assets.graph(GraphQuery(op="path", node="git"))
    specs = await assets.tools()
    assert {s.name for s in specs.tools} == {
        "run_command",
        "run_workflow",
        "query_skill_graph",
        "load_skill",
        "invoke_skill",
    }

    # invoke a skill route through the tool runner: policy, allowed-tools, hooks
    tools = ToolsClient(bus, pid)
    result = await tools.run(
        "invoke_skill",
        {"skill": "notes-reader", "route": "notes/read", "params": {"path": "NOTES.md"}},
        meta=_meta("r1"),
        timeout=20,
    )
    assert result.ok is True, result
    assert "remember the milk" in json.dumps(result.data)
    pre = await hooks.wait(lambda e: e.type == "skill/pre")
    assert pre.nats_subject == subjects.hook("skill/pre")
    assert (
        pre.data["phase"] == "pre"
        and pre.data["skill"] == "notes-reader"
        and pre.data["route"] == "notes/read"
    )
    post = await hooks.wait(lambda e: e.type == "skill/notes/post")  # frontmatter overrides settings
    assert (
        post.data["outcome"] == "ok"
        and post.data["status"] == "ok"
        and post.data["skill_name"] == "notes-reader"
    )
    assert post.source == "/hooks/skill/notes/post"
    assert not any(e.type == "skill/post" for e in hooks.seen)

    # an action outside the skill's allowed-tools: denied, post hook says error
    denied = await tools.run(
        "invoke_skill", {"skill": "notes-reader", "route": "notes/shell"}, meta=_meta("r2"), timeout=20
    )
    assert denied.ok is False and denied.error is not None and denied.error.type == "permission_denied"
    await hooks.wait(lambda e: e.type == "skill/notes/post" and e.data["status"] == "error")

    # a workflow: skill step, command step, outputs; run events
    wf = await tools.run(
        "run_workflow", {"name": "digest", "inputs": {"file": "NOTES.md"}}, meta=_meta("r3"), timeout=20
    )
    assert wf.ok is True, wf
    assert wf.data["outputs"]["prompt"] == "Summarise NOTES.md (NOTES.md)"
    run_id = wf.data["run_id"]
    await signals.wait(lambda e: e.type == "workflow.run.started" and e.data["run_id"] == run_id)
    steps = [e for e in signals.seen if e.type == "workflow.run.step" and e.data["run_id"] == run_id]
    assert [s.data["step"] for s in steps] == ["read", "prompt"]
    await signals.wait(lambda e: e.type == "workflow.run.completed" and e.data["run_id"] == run_id)

    failed = await tools.run("run_workflow", {"name": "fails"}, meta=_meta("r4"), timeout=20)
    assert failed.ok is False
    await signals.wait(lambda e: e.type == "workflow.run.failed" and e.data["workflow"] == "fails")

    loaded_skill = await tools.run("load_skill", {"name": "notes-reader"}, meta=_meta("r5"))
    assert loaded_skill.ok and loaded_skill.data["body"].startswith("# Notes reader")
    cmd = await tools.run("run_command", {"name": "summarise", "arguments": "a.md"}, meta=_meta("r6"))
    assert cmd.data["prompt"] == "Summarise a.md (a.md)"

    # hot reload: a new skill file appears, the watcher reloads and says so
    _write(
        project_dir / ".jido" / "skills" / "fresh" / "SKILL.md", "---\nname: fresh\ndescription: new\n---\n"
    )
    updated = await signals.wait(lambda e: e.type == "skill/registry/updated" and "fresh" in e.data["skills"])
    assert updated.data["count"] == 2
    reloaded = await signals.wait(
        lambda e: e.type == "project.assets_reloaded" and e.data["trigger"] == "watch"
    )
    assert reloaded.data["counts"]["skill"] == 2

    # reload on demand; a layer folder created since the load (.jido_code/) is watched from then on
    _write(
        project_dir / ".jido_code" / "skills" / "late" / "SKILL.md", "---\nname: late\ndescription: l\n---\n"
    )
    report = await assets.reload()
    assert report.counts["skill"] == 3 and report.generation >= 3
    _write(project_dir / ".jido_code" / "commands" / "later.md", "Later $ARGUMENTS")
    await signals.wait(lambda e: e.type == "project.assets_reloaded" and e.data["counts"]["command"] == 2)

    await engine.stop_project(pid)


async def test_unknown_project(running: Config, bus: Bus) -> None:
    with pytest.raises(NotFound, match="unknown project id 'nope'") as info:
        await AssetsClient(bus, "nope").list()
    assert info.value.details == {"project_id": "nope"}


async def _cli(config: Config, *args: str) -> tuple[int, str, str]:
    import os
    import sys

    exe = Path(sys.executable).parent / "jidocode"
    # wide: a long temporary path must not be wrapped in the middle of the name the test looks for
    env = {
        **os.environ,
        "NATS_URL": config.nats_url,
        "JIDO_CODE_HOME": str(config.jido_home),
        "COLUMNS": "500",
    }
    proc = await asyncio.create_subprocess_exec(
        str(exe), *args, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


async def test_cli(running: Config, project_dir: Path) -> None:
    code, out, err = await _cli(running, "assets", "list", str(project_dir), "--type", "workflow", "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert {(a["type"], a["name"]) for a in doc["assets"]} == {("workflow", "digest"), ("workflow", "fails")}
    assert any("duplicate key" in d["problem"] for d in doc["diagnostics"])

    code, out, _ = await _cli(running, "assets", "show", str(project_dir), "skill", "notes-reader")
    assert code == 0 and "route notes/read -> ReadNote" in out and "# Notes reader" in out

    code, _, err = await _cli(running, "assets", "show", str(project_dir), "skill", "nope")
    assert code == 2 and "not_found" in err

    code, out, err = await _cli(running, "assets", "reload", str(project_dir))
    assert code == 0 and "1 skill(s)" in out
    assert "duplicate key" in err and "broken/SKILL.md" in err  # diagnostics on stderr


async def test_cli_prints_asset_text_as_text_never_as_rich_markup(running: Config, tmp_path: Path) -> None:
    """A command's description and argument hint are project text: rich markup in them is shown as
    written (a `[link=…]` or `[/]` would otherwise restyle the terminal or break the listing)."""
    root = tmp_path / "markup"
    hostile = "[bold red]URGENT[/] [link=https://evil.example]click[/link]"
    _write(
        root / ".jido" / "commands" / "shout.md",
        f'---\ndescription: "{hostile}"\nargument-hint: "[/] [x]"\n---\nHello',
    )
    code, out, err = await _cli(running, "assets", "list", str(root), "--type", "command")
    assert code == 0, err
    assert "[bold red]URGENT[/]" in out and "[link=https://evil.example]" in out, out
    code, out, err = await _cli(running, "assets", "show", str(root), "command", "shout")
    assert code == 0, err
    assert hostile in out and "argument_hint: [/] [x]" in out, out
