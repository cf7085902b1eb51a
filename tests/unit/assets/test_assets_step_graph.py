"""Workflow step graphs: the pure plan (property-tested), the loader's checks, and runs against doubles."""

from __future__ import annotations

import asyncio
import graphlib
import itertools
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jidocode.services.asset_loader.discover import SourceFile
from jidocode.services.asset_loader.generation import Generation, compile_generation
from jidocode.services.asset_loader.hooks import HookSignal
from jidocode.services.asset_loader.loaders.workflow import parse_workflow
from jidocode.services.asset_loader.runtime import MAX_PARALLEL_STEPS, AssetRuntime, StepBudgetExceeded
from jidocode.services.asset_loader.step_graph import StepPlan, find_cycle, topological_order
from jidocode.shared.events import EventModel
from jidocode.shared.events.tools import ToolCallMeta, ToolResult, ToolResultError
from jidocode.shared.settings import LoadedSettings, Settings

# -- the pure plan -----------------------------------------------------------------------------------


@st.composite
def dags(draw: st.DrawFn) -> dict[str, list[str]]:
    """A random acyclic graph, its steps listed in a random order (not the topological one)."""
    n = draw(st.integers(1, 12))
    names = [f"s{i}" for i in range(n)]
    deps = {
        name: draw(st.lists(st.sampled_from(names[:i]), unique=True)) if i else []
        for i, name in enumerate(names)
    }
    order = draw(st.permutations(names))
    return {name: deps[name] for name in order}


def _ancestors(deps: dict[str, list[str]], step: str) -> set[str]:
    seen: set[str] = set()
    stack = list(deps[step])
    while stack:
        dep = stack.pop()
        if dep not in seen:
            seen.add(dep)
            stack.extend(deps[dep])
    return seen


@given(dags(), st.data())
@settings(max_examples=300, deadline=None)
def test_every_step_runs_after_its_dependencies(deps: dict[str, list[str]], data: st.DataObject) -> None:
    failing = data.draw(st.sets(st.sampled_from(list(deps))), label="failing")
    plan = StepPlan(deps)
    ready = plan.start()
    running: list[str] = []
    ran: list[str] = []
    passed: set[str] = set()
    while ready or running:
        # Start some ready steps and finish any running one, in an order hypothesis picks.
        if ready and (not running or data.draw(st.booleans(), label="start")):
            step = ready.pop(data.draw(st.integers(0, len(ready) - 1), label="which"))
            assert set(deps[step]) <= passed, f"{step} started before {set(deps[step]) - passed}"
            running.append(step)
            ran.append(step)
            continue
        step = running.pop(data.draw(st.integers(0, len(running) - 1), label="done"))
        ok = step not in failing
        if ok:
            passed.add(step)
        new, _skipped = plan.finish(step, passed=ok)
        ready = plan.sort([*ready, *new])
    assert plan.finished
    # A step runs exactly when every step it (transitively) depends on passed.
    expected = {s for s in deps if not (_ancestors(deps, s) & failing)}
    assert set(ran) == expected and len(ran) == len(expected)
    assert set(plan.skipped) == set(deps) - expected
    for step, cause in plan.skipped.items():
        assert cause in failing and cause in _ancestors(deps, step)


@given(
    st.integers(1, 8).flatmap(
        lambda n: st.dictionaries(
            st.sampled_from([f"s{i}" for i in range(n)]),
            st.lists(st.sampled_from([f"s{i}" for i in range(n)]), max_size=3),
            min_size=1,
        )
    )
)
@settings(max_examples=300, deadline=None)
def test_find_cycle_agrees_with_graphlib(graph: dict[str, list[str]]) -> None:
    deps = {name: [d for d in ds if d in graph] for name, ds in graph.items()}
    cycle = find_cycle(deps)
    try:
        list(graphlib.TopologicalSorter(deps).static_order())
        acyclic = True
    except graphlib.CycleError:
        acyclic = False
    assert (cycle is None) == acyclic
    if cycle is not None:
        assert cycle[0] == cycle[-1]
        for step, dep in itertools.pairwise(cycle):
            assert dep in deps[step]  # every hop is a real dependency
    else:
        order = topological_order(deps)
        assert sorted(order) == sorted(deps)
        assert all(order.index(d) < order.index(s) for s in deps for d in deps[s])


def test_plan_refuses_bad_graphs_and_bad_calls() -> None:
    with pytest.raises(ValueError, match="cycle: a -> b -> a"):
        StepPlan({"a": ["b"], "b": ["a"]})
    with pytest.raises(ValueError, match="unknown dependencies: zz"):
        StepPlan({"a": ["zz"]})
    plan = StepPlan({"a": [], "b": ["a"]})
    with pytest.raises(ValueError, match="'b' was not running"):
        plan.finish("b", passed=True)
    assert plan.start() == ["a"]
    assert plan.finish("a", passed=True) == (["b"], [])


# -- the loader's checks -------------------------------------------------------------------------------


def _wf(text: str) -> Any:
    return parse_workflow(text.encode(), path="/l/workflows/w.yaml", stem="w", layer="project")


def test_graph_workflow_dependencies() -> None:
    wf, diags = _wf(
        "steps:\n"
        "  - {id: pkg, tool: build, depends_on: [lint, test], args: {n: '{{steps.notes.output}}'}}\n"
        "  - {id: lint, tool: ruff}\n"
        "  - {id: test, tool: pytest, needs: lint}\n"
        "  - {id: notes, tool: echo}\n"
    )
    assert diags == [] and wf is not None and wf.graph
    assert {s.id: s.depends_on for s in wf.steps} == {
        "pkg": ["lint", "test", "notes"],  # declared, then read (a later-listed step is fine)
        "lint": [],
        "test": ["lint"],
        "notes": [],
    }


def test_linear_workflow_is_a_chain() -> None:
    wf, diags = _wf(
        "steps: [{id: a, tool: x}, {id: b, tool: y}, {id: c, tool: z, args: '{{steps.a.output}}'}]"
    )
    assert diags == [] and wf is not None and not wf.graph
    assert [s.depends_on for s in wf.steps] == [[], ["a"], ["b", "a"]]


@pytest.mark.parametrize(
    ("text", "key", "fragment"),
    [
        (
            "steps: [{id: a, tool: x, depends_on: [zz]}]",
            "steps[0].depends_on",
            "step 'a' depends on unknown step 'zz'",
        ),
        (
            "steps: [{id: a, tool: x, depends_on: c}, {id: b, tool: y, depends_on: a}, {id: c, tool: z, needs: [b]}]",
            "steps",
            "cycle: a -> c -> b -> a (step 'a' can never run)",
        ),
        ("steps: [{id: a, tool: x, depends_on: a}]", "steps", "cycle: a -> a"),
        ("steps: [{id: a, tool: x, args: '{{steps.a.output}}', depends_on: []}]", "steps", "cycle: a -> a"),
        ("steps: [{id: a, tool: x, depends_on: [1]}]", "steps[0].depends_on", "step id or a list"),
        ("steps: [{id: a, tool: x, depends_on: [], needs: []}]", "steps[0]", "not both"),
        (
            "steps: [{id: a, tool: x, args: '{{steps.q.output}}', needs: []}]",
            "steps[0].args",
            "a step of this",
        ),
        ("max_steps: 0\nsteps: [{tool: x}]", "max_steps", "from 1 to"),
        ("max_steps: true\nsteps: [{tool: x}]", "max_steps", "from 1 to"),
    ],
)
def test_graph_problems_name_the_step(text: str, key: str, fragment: str) -> None:
    wf, diags = _wf(text)
    assert wf is None
    assert [(d.key, d.severity) for d in diags] == [(key, "error")]
    assert fragment in diags[0].problem, diags[0].problem


# -- runs -----------------------------------------------------------------------------------------------


class Ports:
    """Tool-runner double whose calls wait until the test lets them finish, so overlap is visible."""

    def __init__(self, fail: set[str] | None = None) -> None:
        self.fail = fail or set()
        self.started: list[str] = []
        self.finished: list[str] = []
        self.inflight = 0
        self.max_inflight = 0
        self.gate = asyncio.Event()
        self.changed = asyncio.Condition()
        self.events: list[EventModel] = []

    async def run(self, name: str, args: dict[str, Any], meta: ToolCallMeta) -> ToolResult:
        async with self.changed:
            self.started.append(name)
            self.inflight += 1
            self.max_inflight = max(self.max_inflight, self.inflight)
            self.changed.notify_all()
        await self.gate.wait()
        self.inflight -= 1
        self.finished.append(name)
        if name in self.fail:
            return ToolResult(ok=False, error=ToolResultError(type="boom", message=f"{name} failed"))
        return ToolResult(ok=True, data={"tool": name, "args": args})

    async def wait_started(self, count: int) -> None:
        async with self.changed:
            await asyncio.wait_for(self.changed.wait_for(lambda: len(self.started) >= count), 30)

    async def signal(self, event: EventModel) -> None:
        self.events.append(event)

    async def hook(self, hook: HookSignal) -> None:
        pass


META = ToolCallMeta(request_id="req", conversation_id="c")


def _gen(**flows: str) -> Generation:
    src = [
        SourceFile(kind="workflow", layer="project", path=f"/p/workflows/{n}.yaml", stem=n, raw=t.encode())
        for n, t in flows.items()
    ]
    gen = compile_generation(src, LoadedSettings(settings=Settings()))
    assert [d for d in gen.diagnostics if d.severity == "error"] == []
    return gen


DIAMOND = """steps:
  - {id: join, tool: join, depends_on: [left, right], args: {l: '{{steps.left.output.tool}}'}}
  - {id: left, tool: left, depends_on: [top]}
  - {id: right, tool: right, depends_on: top}
  - {id: top, tool: top}
  - {id: alone, tool: alone, needs: []}
outputs: {joined: '{{steps.join.output.args.l}}'}
"""


async def test_independent_steps_run_together_and_dependents_wait(tmp_path: Path) -> None:
    ports = Ports()
    run = asyncio.create_task(
        AssetRuntime("p", str(tmp_path), ports, ports).run_workflow(_gen(d=DIAMOND), "d", {}, META)
    )
    await ports.wait_started(2)
    assert sorted(ports.started) == ["alone", "top"]  # the two with no dependency, at once
    ports.gate.set()
    result = await asyncio.wait_for(run, 30)
    assert result.ok, result
    assert result.data["outputs"] == {"joined": "left"}
    order = ports.started
    assert order.index("top") < order.index("left") and order.index("top") < order.index("right")
    assert order.index("join") > max(order.index("left"), order.index("right"))
    assert ports.max_inflight >= 2
    steps = [e for e in ports.events if e.type == "workflow.run.step"]
    assert {e.step: e.index for e in steps} == {"join": 0, "left": 1, "right": 2, "top": 3, "alone": 4}


async def test_a_failed_step_stops_its_dependents_only(tmp_path: Path) -> None:
    ports = Ports(fail={"left"})
    ports.gate.set()
    result = await AssetRuntime("p", str(tmp_path), ports, ports).run_workflow(_gen(d=DIAMOND), "d", {}, META)
    assert not result.ok and result.error is not None
    assert result.error.message == "workflow 'd' failed at step 'left': left failed (not run: join)"
    assert result.error.details["skipped"] == ["join"] and result.error.type == "boom"
    assert result.data["skipped"] == {"join": {"after_failed": "left"}}
    assert sorted(ports.started) == ["alone", "left", "right", "top"]  # the other branches ran
    failed = ports.events[-1]
    assert failed.type == "workflow.run.failed" and failed.step == "left"


async def test_continue_on_error_lets_dependents_run(tmp_path: Path) -> None:
    flow = "steps: [{id: a, tool: a, continue_on_error: true}, {id: b, tool: b, depends_on: a}]"
    ports = Ports(fail={"a"})
    ports.gate.set()
    result = await AssetRuntime("p", str(tmp_path), ports, ports).run_workflow(_gen(f=flow), "f", {}, META)
    assert result.ok and ports.started == ["a", "b"]


async def test_parallel_steps_are_capped(tmp_path: Path) -> None:
    count = MAX_PARALLEL_STEPS + 4
    flow = "steps:\n" + "".join(f"  - {{id: s{i}, tool: t{i}, needs: []}}\n" for i in range(count))
    ports = Ports()
    run = asyncio.create_task(
        AssetRuntime("p", str(tmp_path), ports, ports).run_workflow(_gen(f=flow), "f", {}, META)
    )
    await ports.wait_started(MAX_PARALLEL_STEPS)
    # Every ready step that could start did so in the same turn of the loop: no more than the cap.
    assert len(ports.started) == MAX_PARALLEL_STEPS
    ports.gate.set()
    assert (await asyncio.wait_for(run, 30)).ok
    assert len(ports.started) == count and ports.max_inflight == MAX_PARALLEL_STEPS


async def test_max_steps_budget_of_a_run(tmp_path: Path) -> None:
    gen = _gen(
        capped="max_steps: 3\nsteps: [{tool: a}, {workflow: sub}, {tool: d}]",
        sub="steps: [{tool: b}, {tool: c}]",
        roomy="max_steps: 4\nsteps: [{tool: a}, {workflow: sub}]",
    )
    ports = Ports()
    ports.gate.set()
    rt = AssetRuntime("p", str(tmp_path), ports, ports)
    result = await rt.run_workflow(gen, "capped", {}, META)
    # a, the sub-workflow step, b: the sub-workflow's second step is the fourth of the run
    assert ports.started == ["a", "b"]
    assert not result.ok and result.error is not None and result.error.type == "step_budget_exceeded"
    assert "workflow 'capped' ran out of its step budget (max_steps: 3" in result.error.message
    assert (await rt.run_workflow(gen, "roomy", {}, META)).ok  # 4 steps in all: within its budget
    with pytest.raises(StepBudgetExceeded, match="max_steps: 3"):
        await rt.run_workflow(
            _gen(flat="max_steps: 3\nsteps: [{tool: a}, {tool: b}, {tool: c}, {tool: d}]"), "flat", {}, META
        )
    failed = ports.events[-1]
    assert failed.type == "workflow.run.failed" and failed.step == "step4"
    assert failed.error["type"] == "step_budget_exceeded"
