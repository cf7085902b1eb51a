"""A workflow run's decisions without effects: what a finished step changes, and what the run returns."""

from __future__ import annotations

from typing import Any

from jidocode.services.asset_loader.models import Workflow, WorkflowStep
from jidocode.services.asset_loader.workflow_run import WorkflowRun, error_of
from jidocode.shared.events.tools import ToolResult, ToolResultError


def _workflow(*steps: WorkflowStep) -> Workflow:
    return Workflow(name="wf", steps=list(steps), graph=True, path="wf.md", layer="project")


def _step(step_id: str, *deps: str, continue_on_error: bool = False) -> WorkflowStep:
    return WorkflowStep(
        id=step_id,
        kind="tool",
        target="read_file",
        depends_on=list(deps),
        continue_on_error=continue_on_error,
    )


def _ok(data: Any = None) -> ToolResult:
    return ToolResult(ok=True, data=data)


def _failed(message: str) -> ToolResult:
    return ToolResult(ok=False, error=ToolResultError(type="boom", message=message))


def test_a_run_starts_with_the_steps_that_depend_on_nothing() -> None:
    run = WorkflowRun("p1", "wf", _workflow(_step("b", "a"), _step("a"), _step("c")), {"x": 1})
    assert run.ready == ["a", "c"]
    assert run.ctx == {"inputs": {"x": 1}, "steps": {}}
    started = run.started_event()
    assert (started.run_id, started.workflow, started.inputs) == (run.run_id, "wf", {"x": 1})


def test_a_finished_step_fills_the_context_and_readies_its_dependents() -> None:
    run = WorkflowRun("p1", "wf", _workflow(_step("a"), _step("b", "a")), {})
    run.ready.pop(0)
    event = run.finish("a", _ok({"n": 2}), 1.5)
    assert run.ready == ["b"]
    assert run.ctx["steps"]["a"] == {"ok": True, "output": {"n": 2}, "error": None}
    assert (event.step, event.index, event.ok, event.duration_ms, event.error) == ("a", 0, True, 1.5, None)
    assert run.failures == []


def test_a_failed_step_skips_its_dependents_and_names_the_run_error() -> None:
    run = WorkflowRun("p1", "wf", _workflow(_step("a"), _step("b", "a"), _step("c", "b"), _step("d")), {})
    run.ready.clear()
    event = run.finish("a", _failed("no file"), 2.0)
    run.finish("d", _ok(), 1.0)
    assert not event.ok and event.error == error_of(_failed("no file"))
    assert run.ready == []
    assert run.skipped == {"b": {"after_failed": "a"}, "c": {"after_failed": "a"}}
    result = run.failed_result()
    assert not result.ok and result.error is not None
    assert result.error.type == "boom"
    assert result.error.message == "workflow 'wf' failed at step 'a': no file (not run: b, c)"
    assert result.error.details == {"run_id": run.run_id, "step": "a", "skipped": ["b", "c"]}
    assert run.failed_event(*run.failures[0]).step == "a"


def test_a_step_that_may_fail_lets_its_dependents_run() -> None:
    run = WorkflowRun("p1", "wf", _workflow(_step("a", continue_on_error=True), _step("b", "a")), {})
    run.ready.clear()
    run.finish("a", _failed("ignored"), 1.0)
    assert run.ready == ["b"] and run.failures == []
    assert run.ctx["steps"]["a"]["ok"] is False


def test_several_failures_are_all_named_first_one_leads() -> None:
    run = WorkflowRun("p1", "wf", _workflow(_step("a"), _step("b")), {})
    run.ready.clear()
    for step_id in run.in_order(["b", "a"]):
        run.finish(step_id, ToolResult(ok=False), 1.0)
    result = run.failed_result()
    assert result.error is not None
    assert result.error.message == "workflow 'wf' failed at step 'a': step failed"
    assert result.error.details == {"run_id": run.run_id, "step": "a", "failed": ["a", "b"]}


def test_a_completed_run_returns_its_outputs_and_steps() -> None:
    run = WorkflowRun("p1", "wf", _workflow(_step("a")), {})
    run.finish("a", _ok("x"), 1.0)
    result = run.completed_result({"out": "x"})
    assert result.ok and result.data == {
        "run_id": run.run_id,
        "outputs": {"out": "x"},
        "steps": run.ctx["steps"],
    }
    assert run.completed_event({"out": "x"}).outputs == {"out": "x"}
