"""Graph workflows over a real NATS server: run through the tool runner, dependents wait, failures skip."""

from __future__ import annotations

import json
from pathlib import Path

from jidocode.shared import subjects
from jidocode.shared.bus import Bus
from jidocode.shared.clients import AssetsClient, EngineClient, ToolsClient
from jidocode.shared.config import Config
from jidocode.shared.events.tools import ToolCallMeta
from tests.integration.assets.signals import Signals

SETTINGS = {"permissions": {"allow": ["Read", "run_workflow"]}}

DIAMOND = """
max_steps: 6
steps:
  - {id: join, command: pair, depends_on: [left, right],
     args: ['{{steps.left.output.content}}', '{{steps.right.output.content}}']}
  - {id: left, tool: read_file, args: {path: a.txt}, depends_on: top}
  - {id: right, tool: read_file, args: {path: b.txt}, depends_on: [top]}
  - {id: top, tool: read_file, args: {path: a.txt}}
outputs: {prompt: '{{steps.join.output.prompt}}'}
"""

BROKEN = """
steps:
  - {id: missing, tool: read_file, args: {path: nowhere.txt}}
  - {id: fine, tool: read_file, args: {path: a.txt}, needs: []}
  - {id: after, tool: read_file, args: {path: b.txt}, depends_on: missing}
"""

TIGHT = "max_steps: 2\nsteps: [{tool: read_file, args: {path: a.txt}}, {command: pair, args: [x, y]}, {command: pair}]\n"

CYCLE = "steps: [{id: a, command: pair, depends_on: b}, {id: b, command: pair, depends_on: a}]\n"


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


async def test_graph_workflows_through_the_tool_runner(running: Config, bus: Bus, tmp_path: Path) -> None:
    root = tmp_path / "proj"
    data = root / ".jido"
    _write(root / "a.txt", "alpha")
    _write(root / "b.txt", "beta")
    _write(data / "settings.json", json.dumps(SETTINGS))
    _write(data / "commands" / "pair.md", "Pair $1 with $2")
    for name, text in {"diamond": DIAMOND, "broken": BROKEN, "tight": TIGHT, "cycle": CYCLE}.items():
        _write(data / "workflows" / f"{name}.yaml", text)
    signals = Signals()
    await bus.subscribe(subjects.signal_filter(), signals)
    await bus.nc.flush()
    pid = (await EngineClient(bus).start_project(str(root))).project_id
    tools = ToolsClient(bus, pid)

    # the cycle is refused at load time, naming the step; the others load
    report = await AssetsClient(bus, pid).diagnostics()
    [problem] = [d for d in report.diagnostics if d["file"].endswith("cycle.yaml")]
    assert problem["key"] == "steps" and "cycle: a -> b -> a (step 'a' can never run)" in problem["problem"]
    assert report.counts["workflow"] == 3
    refused = await tools.run(
        "run_workflow", {"name": "cycle"}, meta=ToolCallMeta(request_id="g0"), timeout=60
    )
    assert not refused.ok and refused.error is not None and refused.error.type == "not_found"

    ok = await tools.run("run_workflow", {"name": "diamond"}, meta=ToolCallMeta(request_id="g1"), timeout=60)
    assert ok.ok, ok
    assert ok.data["outputs"] == {"prompt": "Pair alpha with beta"}
    run_id = ok.data["run_id"]
    await signals.wait(lambda e: e.type == "workflow.run.completed" and e.data["run_id"] == run_id)
    order = [
        e.data["step"] for e in signals.seen if e.type == "workflow.run.step" and e.data["run_id"] == run_id
    ]
    assert order[0] == "top" and order[-1] == "join" and sorted(order[1:3]) == ["left", "right"]

    failed = await tools.run(
        "run_workflow", {"name": "broken"}, meta=ToolCallMeta(request_id="g2"), timeout=60
    )
    assert not failed.ok and failed.error is not None
    assert "failed at step 'missing'" in failed.error.message and "(not run: after)" in failed.error.message
    assert failed.data["steps"]["fine"]["ok"] is True and "after" not in failed.data["steps"]
    end = await signals.wait(lambda e: e.type == "workflow.run.failed" and e.data["workflow"] == "broken")
    assert end.data["step"] == "missing"

    tight = await tools.run("run_workflow", {"name": "tight"}, meta=ToolCallMeta(request_id="g3"), timeout=60)
    assert not tight.ok and tight.error is not None and tight.error.type == "step_budget_exceeded"
    assert "max_steps: 2" in tight.error.message
    stopped = await signals.wait(lambda e: e.type == "workflow.run.failed" and e.data["workflow"] == "tight")
    assert stopped.data["step"] == "step3" and stopped.data["error"]["type"] == "step_budget_exceeded"
