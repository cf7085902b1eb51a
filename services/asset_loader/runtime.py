"""Running assets: skill routes (with pre/post hooks), workflows, and the asset tools.

Side effects go through two ports, so the orchestration here is the same in
the service (NATS) and in tests (in-memory doubles):

* :class:`AssetToolPort` ``run(name, args, meta) -> ToolResult``: the tool runner
  (``jido.tools.<p>.run``), which authorizes every call under the project
  policy;
* :class:`SignalPort` ``signal(event)`` and ``hook(HookSignal)``: publishing.

Skill invocation (seed 001 ``Skill.handle_signal``/``transform_result``):
route → action; the pre hook; the action's tool call, which must also be
allowed by the skill's ``allowed-tools`` (when it lists any); the post hook
with ``status`` ``ok`` or ``error``.

**Workflows stop.** Every step of a workflow, nested workflows included
(inline, or through the tool runner as a ``run_workflow`` tool step), counts
against one budget per top-level call (:class:`StepBudgets`, keyed by the
call's root request id; ``JIDO_WORKFLOW_STEP_BUDGET``, default
:data:`DEFAULT_STEP_BUDGET`). Before each step the run also stops when its
caller stopped: past the call's deadline (``meta.deadline``, set by the
caller and the tool runner) or once the call was cancelled
(:meth:`AssetRuntime.stop`, on ``tool.cancel_requested``). A stopped run fails at
once, whatever ``continue_on_error`` says.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shlex
import time
from collections import OrderedDict
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final, Protocol

from jidocode.services.asset_loader.generation import Generation
from jidocode.services.asset_loader.hooks import HookSignal, hook_signal
from jidocode.services.asset_loader.loaders.command import render_command
from jidocode.services.asset_loader.loaders.workflow import REF
from jidocode.services.asset_loader.models import Skill, SkillAction, Workflow, WorkflowStep
from jidocode.services.asset_loader.workflow_run import WorkflowRun, ms_since
from jidocode.shared.errors import InvalidInput, JidoError, NotFound, PermissionDenied, RequestTimeout
from jidocode.shared.events import EventModel
from jidocode.shared.events.tools import ToolCallMeta, ToolResult, ToolResultError

__all__ = [
    "DEFAULT_STEP_BUDGET",
    "MAX_PARALLEL_STEPS",
    "MAX_SCRIPT_PARAMS_BYTES",
    "MAX_WORKFLOW_DEPTH",
    "SCRIPT_PYTHON",
    "AssetRuntime",
    "AssetToolPort",
    "RunSteps",
    "SignalPort",
    "StepBudgetExceeded",
    "StepBudgets",
    "WorkflowStopped",
    "error_result",
    "resolve_refs",
    "skill_allows",
    "step_budget",
]

MAX_WORKFLOW_DEPTH: Final = 8
#: Workflow steps one top-level call may run in all, nested workflows included.
DEFAULT_STEP_BUDGET: Final = 200
#: The interpreter of an action module's script (``python`` is missing on many systems).
SCRIPT_PYTHON: Final = "python3"
#: The params of a script action travel as one JSON argument of the command line.
MAX_SCRIPT_PARAMS_BYTES: Final = 16 * 1024
#: Steps of one workflow run that run at the same time (independent steps of a graph workflow).
MAX_PARALLEL_STEPS: Final = 8
#: Cancelled calls remembered per project (a cancel arriving for a run that is over is harmless).
_MAX_STOPPED: Final = 4096
_SKILL_PARAM: Final = re.compile(r"\{\{\s*([A-Za-z_][A-Za-z0-9_\-]*)\s*\}\}")


class AssetToolPort(Protocol):
    async def run(self, name: str, args: dict[str, Any], meta: ToolCallMeta) -> ToolResult: ...


class SignalPort(Protocol):
    async def signal(self, event: EventModel) -> None: ...

    async def hook(self, hook: HookSignal) -> None: ...


class StepBudgetExceeded(JidoError):
    error_type = "step_budget_exceeded"


class WorkflowStopped(JidoError):
    error_type = "cancelled"


def step_budget(environ: Mapping[str, str] | None = None) -> int:
    """``JIDO_WORKFLOW_STEP_BUDGET`` (1 … 100000), else :data:`DEFAULT_STEP_BUDGET`."""
    raw = (os.environ if environ is None else environ).get("JIDO_WORKFLOW_STEP_BUDGET")
    if not raw:
        return DEFAULT_STEP_BUDGET
    value = int(raw)
    if not 1 <= value <= 100_000:
        raise ValueError(f"JIDO_WORKFLOW_STEP_BUDGET={raw} is outside 1 … 100000")
    return value


class StepBudgets:
    """Steps taken per top-level call (by root request id) while any run of it is going on.

    A root's count lives as long as one of its runs does (``run``), so nested runs
    share it; ``stop`` marks a root whose caller cancelled. In memory, per process.
    """

    def __init__(self, limit: int) -> None:
        if limit < 1:
            raise ValueError(f"a step budget must be at least 1, got {limit}")
        self.limit = limit
        self._used: dict[str, int] = {}
        self._runs: dict[str, int] = {}
        self._stopped: OrderedDict[str, None] = OrderedDict()

    @contextmanager
    def run(self, root: str) -> Iterator[None]:
        """One run (a workflow, top-level or nested) of ``root``'s call."""
        self._runs[root] = self._runs.get(root, 0) + 1
        self._used.setdefault(root, 0)
        try:
            yield
        finally:
            left = self._runs[root] - 1
            if left:
                self._runs[root] = left
            else:
                del self._runs[root]
                self._used.pop(root, None)
                self._stopped.pop(root, None)

    def used(self, root: str) -> int:
        return self._used.get(root, 0)

    def take(self, root: str) -> None:
        """Count one step of ``root``; :class:`StepBudgetExceeded` once the budget is spent."""
        used = self._used.get(root, 0)
        if used >= self.limit:
            raise StepBudgetExceeded(
                f"the call ran out of its workflow step budget ({self.limit} steps, nested workflows "
                "included): stopped",
                details={"budget": self.limit, "root_request_id": root},
            )
        self._used[root] = used + 1

    def stop(self, root: str) -> None:
        """``root``'s caller cancelled: its runs stop before their next step."""
        self._stopped[root] = None
        self._stopped.move_to_end(root)
        while len(self._stopped) > _MAX_STOPPED:
            self._stopped.popitem(last=False)

    def stopped(self, root: str) -> bool:
        return root in self._stopped


@dataclass
class RunSteps:
    """The steps one run of a workflow with ``max_steps`` took (its inline sub-workflows' included)."""

    workflow: str
    limit: int
    used: int = 0

    def check(self) -> None:
        """:class:`StepBudgetExceeded` when the run took ``limit`` steps already."""
        if self.used >= self.limit:
            raise StepBudgetExceeded(
                f"workflow {self.workflow!r} ran out of its step budget (max_steps: {self.limit}, "
                "sub-workflows run inline included): stopped",
                details={"budget": self.limit, "workflow": self.workflow},
            )


def error_result(exc: JidoError) -> ToolResult:
    return ToolResult(
        ok=False, error=ToolResultError(type=exc.type, message=exc.message, details=exc.details)
    )


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


# --- references between workflow steps ---------------------------------------------


def _lookup(path: str, ctx: Mapping[str, Any]) -> Any:
    value: Any = ctx
    for part in path.split("."):
        if isinstance(value, Mapping) and part in value:
            value = value[part]
        elif isinstance(value, list) and part.isdigit() and int(part) < len(value):
            value = value[int(part)]
        else:
            return None
    return value


def _text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False)


def resolve_refs(value: Any, ctx: Mapping[str, Any]) -> Any:
    """Fill ``{{inputs.x}}``/``{{steps.id.output…}}``; a whole-string reference keeps its type."""
    if isinstance(value, str):
        whole = REF.fullmatch(value.strip())
        if whole:
            return _lookup(whole.group(1), ctx)
        return REF.sub(lambda m: _text(_lookup(m.group(1), ctx)), value)
    if isinstance(value, Mapping):
        return {k: resolve_refs(v, ctx) for k, v in value.items()}
    if isinstance(value, list):
        return [resolve_refs(v, ctx) for v in value]
    return value


def _fill_params(value: Any, params: Mapping[str, Any]) -> Any:
    """``{{name}}`` in a skill action's ``args`` from the invocation's params."""
    if isinstance(value, str):
        whole = _SKILL_PARAM.fullmatch(value.strip())
        if whole and whole.group(1) in params:
            return params[whole.group(1)]
        return _SKILL_PARAM.sub(
            lambda m: _text(params[m.group(1)]) if m.group(1) in params else m.group(0), value
        )
    if isinstance(value, Mapping):
        return {k: _fill_params(v, params) for k, v in value.items()}
    if isinstance(value, list):
        return [_fill_params(v, params) for v in value]
    return value


def skill_allows(skill: Skill, root: str, tool: str, args: Mapping[str, Any]) -> tuple[bool, str]:
    """Whether the skill's ``allowed-tools`` permit this call (no list: no extra limit).

    Uses the project policy's rule grammar and matcher, with the skill's list
    as the only ``allow`` rules and ``deny`` as default.
    """
    if not skill.allowed_tools:
        return True, "the skill lists no allowed-tools"
    from jidocode.shared.policy.decision import Effect, Policy, authorize
    from jidocode.shared.policy.rules import InvalidRule

    try:
        policy = Policy.build(root, allow=skill.allowed_tools, default="deny")
    except InvalidRule as exc:
        return False, f"invalid allowed-tools in skill {skill.name!r}: {exc.problem}"
    decision = authorize(policy, tool, args)
    if decision.effect is Effect.ALLOW:
        return True, decision.reason
    return False, f"{tool} is not in the allowed-tools of skill {skill.name!r} ({decision.reason})"


class AssetRuntime:
    """Runs skills, commands and workflows of one project generation."""

    def __init__(
        self,
        project_id: str,
        root: str,
        tools: AssetToolPort,
        signals: SignalPort,
        *,
        budgets: StepBudgets | None = None,
    ) -> None:
        self.project_id = project_id
        self.root = root
        self.tools = tools
        self.signals = signals
        self.budgets = budgets or StepBudgets(step_budget())

    def stop(self, request_id: str) -> None:
        """The call ``request_id`` was cancelled: its workflows stop before their next step."""
        self.budgets.stop(request_id)

    def _before_step(self, meta: ToolCallMeta, limits: tuple[RunSteps, ...] = ()) -> None:
        """Stop when the caller stopped (cancel, deadline) or a step budget is spent: the call's,
        or the ``max_steps`` of a workflow whose run this step is part of (``limits``)."""
        root = meta.root_request_id
        if self.budgets.stopped(root):
            raise WorkflowStopped(
                "the call was cancelled: the workflow stops", details={"root_request_id": root}
            )
        if meta.deadline is not None and time.time() >= meta.deadline:
            raise RequestTimeout(
                "the caller stopped waiting (its deadline passed): the workflow stops",
                details={"deadline": meta.deadline},
                retryable=False,
            )
        for limit in limits:
            limit.check()
        self.budgets.take(root)
        for limit in limits:
            limit.used += 1

    # -- skills --------------------------------------------------------------------------

    async def invoke_skill(
        self, gen: Generation, skill_name: str, route: str, params: Mapping[str, Any], meta: ToolCallMeta
    ) -> ToolResult:
        skill = gen.skills.get(skill_name)
        if skill is None:
            raise NotFound(f"no skill named {skill_name!r}", details={"skill": skill_name})
        action = skill.action_for(route)
        if action is None:
            raise NotFound(
                f"skill {skill_name!r} has no route {route!r}",
                details={"skill": skill_name, "route": route, "routes": [r.path for r in skill.router]},
            )
        hooks = gen.settings.hooks
        pre = hook_signal("pre", skill, route, hooks, timestamp=_now())
        if pre is not None:
            await self.signals.hook(pre)
        try:
            if action.script is not None:
                result = await self._run_script(skill, action, params, meta, route)
            else:
                result = await self._run_action(skill, action, params, meta, route)
        except JidoError as exc:
            result = error_result(exc)
        post = hook_signal(
            "post", skill, route, hooks, timestamp=_now(), status="ok" if result.ok else "error"
        )
        if post is not None:
            await self.signals.hook(post)
        return result

    async def _run_action(
        self, skill: Skill, action: SkillAction, params: Mapping[str, Any], meta: ToolCallMeta, route: str
    ) -> ToolResult:
        skill_name = skill.name
        tool = action.tool_name
        if action.args:
            # ``{{skill_dir}}`` names the skill's folder (relative to the root when inside it),
            # so an action can run the skill's ``scripts/``.
            args = _fill_params(action.args, {"skill_dir": _skill_dir(skill, self.root), **params})
        else:
            args = dict(params)
        if not isinstance(args, dict):
            raise InvalidInput(f"action {action.name!r} of skill {skill_name!r} needs object args")
        allowed, reason = skill_allows(skill, self.root, tool, args)
        if not allowed:
            raise PermissionDenied(reason, details={"skill": skill_name, "tool": tool})
        child = meta.model_copy(update={"request_id": f"{meta.request_id}/skill/{skill_name}/{route}"})
        return await self.tools.run(tool, args, child)

    async def _run_script(
        self, skill: Skill, action: SkillAction, params: Mapping[str, Any], meta: ToolCallMeta, route: str
    ) -> ToolResult:
        """An action module's script: ``python3 <skill_dir>/<script> '<params as JSON>'`` through
        the ``bash`` tool. Exit 0 is success, its output (JSON when it parses) the result."""
        assert action.script is not None
        script = f"{_skill_dir(skill, self.root)}/{action.script}"
        payload = json.dumps(dict(params), ensure_ascii=False, separators=(",", ":"))
        if len(payload) > MAX_SCRIPT_PARAMS_BYTES:
            raise InvalidInput(
                f"params of action {action.name!r} of skill {skill.name!r} are {len(payload)} bytes as JSON; "
                f"a script action takes at most {MAX_SCRIPT_PARAMS_BYTES}",
                details={"skill": skill.name, "action": action.name, "limit": MAX_SCRIPT_PARAMS_BYTES},
            )
        tail = f"{shlex.quote(script)} {shlex.quote(payload)}"
        args = {"command": f"{SCRIPT_PYTHON} {tail}"}
        allowed, reason = skill_allows(skill, self.root, "bash", args)
        if not allowed:
            # A skill writes ``Bash(python:*)`` (seed 001) for the interpreter we spell python3.
            allowed = skill_allows(skill, self.root, "bash", {"command": f"python {tail}"})[0]
        if not allowed:
            raise PermissionDenied(reason, details={"skill": skill.name, "tool": "bash"})
        child = meta.model_copy(update={"request_id": f"{meta.request_id}/skill/{skill.name}/{route}"})
        result = await self.tools.run("bash", args, child)
        if not result.ok or not isinstance(result.data, dict):
            return result
        output = result.data.get("output", "")
        if result.data.get("exit_code") != 0:
            return ToolResult(
                ok=False,
                data=result.data,
                error=ToolResultError(
                    type="action_failed",
                    message=f"action {action.name!r} of skill {skill.name!r} ({action.script}) exited with "
                    f"{result.data.get('exit_code')}: {str(output)[-500:]}",
                    details={
                        "skill": skill.name,
                        "action": action.name,
                        "exit_code": result.data.get("exit_code"),
                    },
                ),
            )
        try:
            value: Any = json.loads(output)
        except (TypeError, ValueError):
            value = output
        return ToolResult(ok=True, data={"result": value, **result.data})

    # -- workflows -------------------------------------------------------------------------

    async def run_workflow(
        self,
        gen: Generation,
        name: str,
        inputs: Mapping[str, Any],
        meta: ToolCallMeta,
        *,
        depth: int = 0,
        limits: tuple[RunSteps, ...] = (),
    ) -> ToolResult:
        workflow = gen.workflows.get(name)
        if workflow is None:
            raise NotFound(f"no workflow named {name!r}", details={"workflow": name})
        if depth >= MAX_WORKFLOW_DEPTH:
            raise InvalidInput(
                f"sub-workflows nested deeper than {MAX_WORKFLOW_DEPTH}", details={"workflow": name}
            )
        values = _inputs(workflow, inputs)
        if workflow.max_steps is not None:
            limits = (*limits, RunSteps(workflow=name, limit=workflow.max_steps))
        with self.budgets.run(meta.root_request_id):
            return await self._run_workflow(gen, name, workflow, values, meta, depth, limits)

    async def _run_workflow(
        self,
        gen: Generation,
        name: str,
        workflow: Workflow,
        values: dict[str, Any],
        meta: ToolCallMeta,
        depth: int,
        limits: tuple[RunSteps, ...],
    ) -> ToolResult:
        """Run the steps as their dependency graph allows, at most :data:`MAX_PARALLEL_STEPS` at once.

        A failed step (without ``continue_on_error``) skips every step that depends on it;
        the others still run, and the run fails naming the step. A stop (budget, deadline,
        cancel) starts no further step, waits for the running ones and raises.
        """
        run = WorkflowRun(self.project_id, name, workflow, values)
        await self.signals.signal(run.started_event())
        stopped = await self._run_steps(gen, run, meta, depth, limits)
        if stopped is not None:
            step_id, stop = stopped
            await self.signals.signal(run.failed_event(step_id, stop.to_info().model_dump(mode="json")))
            raise stop
        if run.failures:
            await self.signals.signal(run.failed_event(*run.failures[0]))
            return run.failed_result()
        outputs = resolve_refs(workflow.outputs, run.ctx) if workflow.outputs else {}
        await self.signals.signal(run.completed_event(outputs))
        return run.completed_result(outputs)

    async def _run_steps(
        self, gen: Generation, run: WorkflowRun, meta: ToolCallMeta, depth: int, limits: tuple[RunSteps, ...]
    ) -> tuple[str, JidoError] | None:
        """Start ready steps and record finished ones until none is left; the step a stop came
        before and the stop (``None``: no stop). Steps still running when this ends are cancelled."""
        running: dict[asyncio.Task[tuple[ToolResult, float]], str] = {}
        stopped: tuple[str, JidoError] | None = None
        try:
            while run.ready or running:
                if stopped is None:
                    stopped = self._start_ready(gen, run, meta, depth, limits, running)
                if not running:
                    break
                done, _ = await asyncio.wait(running, return_when=asyncio.FIRST_COMPLETED)
                finished = {running.pop(task): task for task in done}
                for step_id in run.in_order(finished):
                    result, duration = finished[step_id].result()
                    await self.signals.signal(run.finish(step_id, result, duration))
        finally:
            for task in running:
                task.cancel()
            if running:
                await asyncio.gather(*running, return_exceptions=True)
        return stopped

    def _start_ready(
        self,
        gen: Generation,
        run: WorkflowRun,
        meta: ToolCallMeta,
        depth: int,
        limits: tuple[RunSteps, ...],
        running: dict[asyncio.Task[tuple[ToolResult, float]], str],
    ) -> tuple[str, JidoError] | None:
        """Start ready steps up to :data:`MAX_PARALLEL_STEPS` running; a stop before one ends
        the starting (that step and the stop are returned)."""
        while run.ready and len(running) < MAX_PARALLEL_STEPS:
            step_id = run.ready.pop(0)
            try:
                self._before_step(meta, limits)
            except JidoError as exc:
                return step_id, exc
            step = run.steps[step_id]
            task = asyncio.create_task(
                self._guarded_step(gen, run.workflow, step, run.ctx, meta, run.run_id, depth, limits)
            )
            running[task] = step_id
        return None

    async def _guarded_step(
        self,
        gen: Generation,
        workflow: Workflow,
        step: WorkflowStep,
        ctx: Mapping[str, Any],
        meta: ToolCallMeta,
        run_id: str,
        depth: int,
        limits: tuple[RunSteps, ...],
    ) -> tuple[ToolResult, float]:
        """One step's result (a :class:`JidoError` becomes an error result) and its duration."""
        step_started = time.monotonic()
        try:
            result = await self._step(gen, workflow, step, ctx, meta, run_id, depth, limits)
        except JidoError as exc:
            result = error_result(exc)
        return result, ms_since(step_started)

    async def _step(
        self,
        gen: Generation,
        workflow: Workflow,
        step: WorkflowStep,
        ctx: Mapping[str, Any],
        meta: ToolCallMeta,
        run_id: str,
        depth: int,
        limits: tuple[RunSteps, ...] = (),
    ) -> ToolResult:
        args = resolve_refs(step.args, ctx)
        child = meta.model_copy(update={"request_id": f"{meta.request_id}/wf/{run_id}/{step.id}"})
        if step.kind == "tool":
            if args is None:
                args = {}
            if not isinstance(args, dict):
                raise InvalidInput(f"step {step.id!r}: a tool step needs object args")
            return await self.tools.run(step.target, args, child)
        if step.kind == "command":
            command = gen.commands.get(step.target)
            if command is None:
                raise NotFound(f"no command named {step.target!r}", details={"command": step.target})
            prompt = render_command(command, args if isinstance(args, dict | list) else _text(args))
            return ToolResult(
                ok=True, data={"command": command.name, "prompt": prompt, "model": command.model}
            )
        if step.kind == "skill":
            params = args if isinstance(args, dict) else ({} if args is None else {"input": args})
            return await self.invoke_skill(gen, step.target, step.route or "", params, child)
        sub_inputs = args if isinstance(args, dict) else {}
        return await self.run_workflow(gen, step.target, sub_inputs, child, depth=depth + 1, limits=limits)


def _skill_dir(skill: Skill, root: str) -> str:
    folder = os.path.dirname(skill.path)
    rel = os.path.relpath(folder, root)
    return folder if rel == ".." or rel.startswith("../") else rel


def _inputs(workflow: Workflow, given: Mapping[str, Any]) -> dict[str, Any]:
    values: dict[str, Any] = {}
    declared = {i.name for i in workflow.inputs}
    unknown = sorted(set(given) - declared)
    if unknown and declared:
        raise InvalidInput(
            f"workflow {workflow.name!r} has no input(s) {', '.join(unknown)}",
            details={"unknown": unknown, "declared": sorted(declared)},
        )
    for spec in workflow.inputs:
        if spec.name in given:
            values[spec.name] = given[spec.name]
        elif spec.required:
            raise InvalidInput(
                f"workflow {workflow.name!r} needs input {spec.name!r}", details={"input": spec.name}
            )
        else:
            values[spec.name] = spec.default
    if not declared:
        values.update(given)
    return values
