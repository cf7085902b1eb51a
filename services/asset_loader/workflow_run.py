"""One run of a workflow as data: what is ready, what ran, what failed, and what it returns (pure).

:class:`WorkflowRun` holds a run's state between the runtime's effects (starting step
tasks, publishing the run's signals): it records each finished step (its context entry,
its failure, the steps that became ready) and builds the run's events and its result.
No I/O here; the clock is read only for the durations the events carry.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from jidocode.services.asset_loader.models import Workflow, WorkflowStep
from jidocode.services.asset_loader.step_graph import StepPlan
from jidocode.shared.envelope import new_id
from jidocode.shared.events.assets import (
    WorkflowRunCompleted,
    WorkflowRunFailed,
    WorkflowRunStarted,
    WorkflowRunStep,
)
from jidocode.shared.events.tools import ToolResult, ToolResultError

__all__ = ["StepFailure", "WorkflowRun", "error_of", "ms_since"]

#: A failed step and its error (the result's error as JSON).
StepFailure = tuple[str, dict[str, Any]]


def error_of(result: ToolResult) -> dict[str, Any] | None:
    """A result's error as JSON (``None`` when it succeeded)."""
    return result.error.model_dump(mode="json") if result.error is not None else None


def ms_since(started: float) -> float:
    """Milliseconds since the monotonic ``started``, to a tenth."""
    return round((time.monotonic() - started) * 1000, 1)


@dataclass
class WorkflowRun:
    """The state of one workflow run; ``ready`` holds the steps to start, in definition order."""

    project_id: str
    name: str
    workflow: Workflow
    values: dict[str, Any]
    run_id: str = field(default_factory=new_id)
    started: float = field(default_factory=time.monotonic)
    failures: list[StepFailure] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.steps: dict[str, WorkflowStep] = {step.id: step for step in self.workflow.steps}
        self.index: dict[str, int] = {step.id: i for i, step in enumerate(self.workflow.steps)}
        self.plan = StepPlan({step.id: step.depends_on for step in self.workflow.steps})
        self.ctx: dict[str, Any] = {"inputs": self.values, "steps": {}}
        self.ready: list[str] = self.plan.start()

    def in_order(self, step_ids: Iterable[str]) -> list[str]:
        """``step_ids`` in definition order (finished steps are reported in that order)."""
        return sorted(step_ids, key=self.index.__getitem__)

    def finish(self, step_id: str, result: ToolResult, duration_ms: float) -> WorkflowRunStep:
        """Record a finished step (its context entry; a failure, unless it may fail; the steps
        that became ready) and give the event announcing it."""
        step = self.steps[step_id]
        error = error_of(result)
        self.ctx["steps"][step_id] = {"ok": result.ok, "output": result.data, "error": error}
        passed = result.ok or step.continue_on_error
        if not passed:
            self.failures.append((step_id, error or {"type": "error", "message": "step failed"}))
        newly_ready, _skipped = self.plan.finish(step_id, passed=passed)
        self.ready = self.plan.sort([*self.ready, *newly_ready])
        return WorkflowRunStep(
            project_id=self.project_id,
            run_id=self.run_id,
            workflow=self.name,
            step=step_id,
            index=self.index[step_id],
            kind=step.kind,
            target=step.target,
            ok=result.ok,
            error=error,
            duration_ms=duration_ms,
        )

    @property
    def skipped(self) -> dict[str, dict[str, str]]:
        """Steps that will never run, each with the failed step that stopped it."""
        return {step: {"after_failed": cause} for step, cause in self.plan.skipped.items()}

    def started_event(self) -> WorkflowRunStarted:
        return WorkflowRunStarted(
            project_id=self.project_id, run_id=self.run_id, workflow=self.name, inputs=self.values
        )

    def failed_event(self, step_id: str, error: dict[str, Any]) -> WorkflowRunFailed:
        return WorkflowRunFailed(
            project_id=self.project_id,
            run_id=self.run_id,
            workflow=self.name,
            step=step_id,
            error=error,
            duration_ms=ms_since(self.started),
        )

    def completed_event(self, outputs: dict[str, Any]) -> WorkflowRunCompleted:
        return WorkflowRunCompleted(
            project_id=self.project_id,
            run_id=self.run_id,
            workflow=self.name,
            outputs=outputs,
            duration_ms=ms_since(self.started),
        )

    def completed_result(self, outputs: dict[str, Any]) -> ToolResult:
        return ToolResult(
            ok=True, data={"run_id": self.run_id, "outputs": outputs, "steps": self.ctx["steps"]}
        )

    def failed_result(self) -> ToolResult:
        """The result of a run with failed steps: the first failure names the run's error."""
        step_id, error = self.failures[0]
        skipped = self.skipped
        details: dict[str, Any] = {"run_id": self.run_id, "step": step_id}
        if len(self.failures) > 1:
            details["failed"] = [f[0] for f in self.failures]
        if skipped:
            details["skipped"] = self.in_order(skipped)
        return ToolResult(
            ok=False,
            data={"run_id": self.run_id, "steps": self.ctx["steps"], "skipped": skipped},
            error=ToolResultError(
                type=str(error.get("type", "error")),
                message=f"workflow {self.name!r} failed at step {step_id!r}: {error.get('message', '')}"
                + (f" (not run: {', '.join(details['skipped'])})" if skipped else ""),
                details=details,
            ),
        )
