"""Workflows: ``workflows/<name>.md`` (definition in the frontmatter) or ``<name>.yaml``.

A definition::

    name: release                   # default: the file name
    description: Cut a release
    inputs:                         # mapping name -> {description, required, default} | default
      version: {required: true}
    steps:                          # ordered; each has exactly one of tool/command/skill/workflow
      - id: test
        tool: bash
        args: {command: "pytest -q"}
      - id: notes
        command: changelog
        args: "{{inputs.version}}"
      - id: text
        skill: pdf-processor
        route: pdf/extract/text
        args: {path: "{{steps.test.output}}"}
      - id: sub
        workflow: publish
        args: {version: "{{inputs.version}}"}
    outputs:
      notes: "{{steps.notes.output}}"

A **linear** workflow (no step says ``depends_on``) runs its steps in order:
each depends on the one before, and ``{{steps.X…}}`` must name an earlier
step. A **graph** workflow (any step says ``depends_on: [a, b]``, or
``needs``, a step id or a list) runs each step after the steps it declares
and the steps it reads (``{{steps.X…}}``, which may name any step); steps
with nothing between them may run at the same time::

    steps:
      - {id: lint, tool: bash, args: {command: "ruff check ."}}
      - {id: test, tool: bash, args: {command: "pytest -q"}}
      - {id: pkg,  tool: bash, args: {command: "python -m build"}, depends_on: [lint, test]}
    max_steps: 20                   # optional: steps one run may take, inline sub-workflows included

Compilation checks ids, kinds, that every ``{{inputs.Y}}`` names a declared
input, that every dependency names a step of the workflow and that the
dependencies form no cycle (each a diagnostic naming the step). Cycles
through sub-workflows are found across the whole generation by
:func:`find_cycles`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from pydantic import ValidationError

from jidocode.services.asset_loader.models import StepKind, Workflow, WorkflowInput, WorkflowStep
from jidocode.services.asset_loader.safe_yaml import YamlError, load_yaml
from jidocode.services.asset_loader.step_graph import find_cycle
from jidocode.services.asset_loader.text import (
    decode_text,
    jsonable,
    name_problem,
    split_frontmatter,
)
from jidocode.shared.settings import Diagnostic

__all__ = ["MAX_STEPS", "MAX_STEP_BUDGET", "REF", "find_cycles", "parse_workflow", "references"]

MAX_STEPS: Final = 200
#: The largest ``max_steps`` a workflow may declare.
MAX_STEP_BUDGET: Final = 10_000
_DEPS_KEYS: Final = ("depends_on", "needs")
#: ``{{ inputs.x }}`` / ``{{ steps.id.output.field }}``.
REF: Final = re.compile(r"\{\{\s*((?:inputs|steps)(?:\.[A-Za-z0-9_\-]+)+)\s*\}\}")
_STEP_ID: Final = re.compile(r"^[A-Za-z0-9_\-]{1,64}$")
_KINDS: Final[tuple[StepKind, ...]] = ("tool", "command", "skill", "workflow")


def references(value: Any) -> list[str]:
    """Every ``inputs.…``/``steps.…`` reference inside ``value`` (strings, lists, mappings)."""
    found: list[str] = []
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            found.extend(REF.findall(item))
        elif isinstance(item, Mapping):
            stack.extend(reversed(list(item.values())))
        elif isinstance(item, list):
            stack.extend(reversed(item))
    return found


def parse_workflow(
    raw: bytes, *, path: str, stem: str, layer: str
) -> tuple[Workflow | None, list[Diagnostic]]:
    """Parse and compile one workflow file (markdown with frontmatter, or YAML)."""
    text, diags = decode_text(raw, path)
    if text is None:
        return None, diags
    read = _definition(text, path, diags)
    if read is None:
        return None, diags
    definition, body = read
    name = definition.get("name", stem)
    problem = name_problem(name, stem, "file name")
    if problem is not None:
        diags.append(Diagnostic(file=path, key="name", problem=problem))
        return None, diags
    name = stem  # checked equal above
    description = definition.get("description", "")
    if not isinstance(description, str):
        diags.append(Diagnostic(file=path, key="description", problem="must be a string", severity="warning"))
        description = ""
    inputs = _inputs(definition.get("inputs"), path, diags)
    if inputs is None:
        return None, diags
    steps = _steps(definition.get("steps"), path, {i.name for i in inputs}, diags)
    if steps is None:
        return None, diags
    outputs = definition.get("outputs", {})
    if not _outputs_ok(outputs, {s.id for s in steps}, {i.name for i in inputs}, path, diags):
        return None, diags
    max_steps = definition.get("max_steps")
    if max_steps is not None and not _is_step_budget(max_steps):
        diags.append(
            Diagnostic(
                file=path, key="max_steps", problem=f"must be a whole number from 1 to {MAX_STEP_BUDGET}"
            )
        )
        return None, diags
    try:
        workflow = Workflow(
            name=name,
            description=description,
            inputs=inputs,
            steps=steps,
            outputs=jsonable(outputs) or {},
            graph=_is_graph(definition["steps"]),
            max_steps=max_steps,
            body=body,
            path=path,
            layer=layer,
        )
    except ValidationError as exc:
        diags.append(Diagnostic(file=path, problem=str(exc.errors()[0]["msg"])))
        return None, diags
    return workflow, diags


def _definition(text: str, path: str, diags: list[Diagnostic]) -> tuple[dict[str, Any], str] | None:
    """The definition (a YAML file, or a markdown file's frontmatter) and the markdown body;
    ``None`` when it is unreadable or not a mapping with string keys (said in ``diags``)."""
    body = ""
    definition: Any
    if path.endswith((".yaml", ".yml")):
        try:
            definition = load_yaml(text)
        except YamlError as exc:
            diags.append(Diagnostic(file=path, problem=str(exc)))
            return None
    else:
        definition, body, fm_diags = split_frontmatter(text, path)
        diags.extend(fm_diags)
        if definition is None:
            return None
    if not isinstance(definition, dict):
        diags.append(Diagnostic(file=path, problem="workflow definition must be a mapping"))
        return None
    if any(not isinstance(k, str) for k in definition):
        diags.append(Diagnostic(file=path, problem="workflow keys must be strings"))
        return None
    return definition, body


def _outputs_ok(outputs: Any, steps: set[str], inputs: set[str], path: str, diags: list[Diagnostic]) -> bool:
    """Whether ``outputs`` maps names to templates that read only the workflow's steps and inputs."""
    if not isinstance(outputs, dict) or any(not isinstance(k, str) for k in outputs):
        diags.append(Diagnostic(file=path, key="outputs", problem="must be a mapping of names to templates"))
        return False
    return _check_refs(outputs, "outputs", steps, inputs, path, diags)


def _is_step_budget(value: Any) -> bool:
    """Whether ``value`` is a ``max_steps``: a whole number from 1 to :data:`MAX_STEP_BUDGET`."""
    return isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= MAX_STEP_BUDGET


def _inputs(value: Any, path: str, diags: list[Diagnostic]) -> list[WorkflowInput] | None:
    if value is None:
        return []
    if isinstance(value, list):
        value = {item: None for item in value} if all(isinstance(i, str) for i in value) else None
    if not isinstance(value, dict):
        diags.append(Diagnostic(file=path, key="inputs", problem="must be a mapping or a list of names"))
        return None
    out: list[WorkflowInput] = []
    for name, spec in value.items():
        if not isinstance(name, str) or not _STEP_ID.match(name):
            diags.append(Diagnostic(file=path, key="inputs", problem=f"invalid input name {name!r}"))
            return None
        if isinstance(spec, dict):
            desc = spec.get("description")
            out.append(
                WorkflowInput(
                    name=name,
                    description=desc if isinstance(desc, str) else None,
                    required=spec.get("required") is True,
                    default=jsonable(spec.get("default")),
                )
            )
        else:
            out.append(WorkflowInput(name=name, default=jsonable(spec)))
    return out


def _is_graph(steps: list[Any]) -> bool:
    """A step declares ``depends_on``/``needs``: the workflow is a graph, not a list."""
    return any(isinstance(item, dict) and k in item for item in steps for k in _DEPS_KEYS)


def _declared_deps(item: Mapping[str, Any], key: str, path: str, diags: list[Diagnostic]) -> list[str] | None:
    """The ``depends_on`` (or ``needs``) of one step: a step id or a list of them."""
    given = [k for k in _DEPS_KEYS if k in item]
    if len(given) > 1:
        diags.append(Diagnostic(file=path, key=key, problem="give depends_on or needs, not both"))
        return None
    if not given:
        return []
    value = item[given[0]]
    names = [value] if isinstance(value, str) else value
    if not isinstance(names, list) or not all(isinstance(n, str) and _STEP_ID.match(n) for n in names):
        diags.append(
            Diagnostic(file=path, key=f"{key}.{given[0]}", problem="must be a step id or a list of step ids")
        )
        return None
    return list(dict.fromkeys(names))


def _steps(value: Any, path: str, inputs: set[str], diags: list[Diagnostic]) -> list[WorkflowStep] | None:
    """Compile the steps: ids first (a graph step may name any step, wherever it is listed), then
    each step, then the check that their dependencies form no cycle."""
    if not isinstance(value, list) or not value:
        diags.append(Diagnostic(file=path, key="steps", problem="a workflow needs a non-empty list of steps"))
        return None
    if len(value) > MAX_STEPS:
        diags.append(Diagnostic(file=path, key="steps", problem=f"more than {MAX_STEPS} steps"))
        return None
    ids = _step_ids(value, path, diags)
    if ids is None:
        return None
    where = _StepsBeingRead(ids=ids, graph=_is_graph(value), inputs=inputs, path=path, diags=diags)
    steps: list[WorkflowStep] = []
    for i, item in enumerate(value):
        step = _step(item, i, where)
        if step is None:
            return None
        steps.append(step)
    cycle = find_cycle({s.id: s.depends_on for s in steps})
    if cycle is not None:
        names = " -> ".join(cycle)
        diags.append(
            Diagnostic(
                file=path,
                key="steps",
                problem=f"steps depend on each other in a cycle: {names} (step {cycle[0]!r} can never run)",
            )
        )
        return None
    return steps


def _step_ids(value: list[Any], path: str, diags: list[Diagnostic]) -> list[str] | None:
    """Each step's id (default ``step<n>``); ``None`` when a step is no mapping or an id is
    invalid or repeated."""
    ids: list[str] = []
    for i, item in enumerate(value):
        key = f"steps[{i}]"
        if not isinstance(item, dict):
            diags.append(Diagnostic(file=path, key=key, problem="a step must be a mapping"))
            return None
        step_id = item.get("id", f"step{i + 1}")
        if not isinstance(step_id, str) or not _STEP_ID.match(step_id) or step_id in ids:
            diags.append(
                Diagnostic(file=path, key=f"{key}.id", problem=f"invalid or repeated step id {step_id!r}")
            )
            return None
        ids.append(step_id)
    return ids


@dataclass(frozen=True)
class _StepsBeingRead:
    """What compiling one step needs to know of the others (and where to say what is wrong)."""

    ids: list[str]
    graph: bool
    inputs: set[str]
    path: str
    diags: list[Diagnostic]

    def visible(self, index: int) -> set[str]:
        """The steps step ``index`` may read and name: any (graph), else the earlier ones."""
        return set(self.ids) if self.graph else set(self.ids[:index])

    def problem(self, key: str, problem: str) -> None:
        self.diags.append(Diagnostic(file=self.path, key=key, problem=problem))


def _step(item: dict[str, Any], i: int, where: _StepsBeingRead) -> WorkflowStep | None:
    """Compile step ``i``: its kind and target, the steps it reads and the ones it depends on."""
    key = f"steps[{i}]"
    step_id = where.ids[i]
    kinds = [k for k in _KINDS if k in item]
    if len(kinds) != 1:
        where.problem(key, "a step needs exactly one of tool, command, skill, workflow")
        return None
    kind: StepKind = kinds[0]
    target = item[kind]
    if not isinstance(target, str) or not target:
        where.problem(f"{key}.{kind}", "must be a name")
        return None
    route = item.get("route")
    if kind == "skill" and not isinstance(route, str):
        where.problem(f"{key}.route", "a skill step needs a route")
        return None
    args = jsonable(item.get("args", item.get("with")))
    visible = where.visible(i)
    if not _check_refs(
        args, f"{key}.args", visible, where.inputs, where.path, where.diags, graph=where.graph
    ):
        return None
    declared = _declared_deps(item, key, where.path, where.diags)
    if declared is None:
        return None
    unknown = next((dep for dep in declared if dep not in visible), None)
    if unknown is not None:
        where.problem(f"{key}.depends_on", f"step {step_id!r} depends on unknown step {unknown!r}")
        return None
    needs = _steps_read(args)
    previous = [where.ids[i - 1]] if not where.graph and i else []
    return WorkflowStep(
        id=step_id,
        kind=kind,
        target=target,
        route=route if kind == "skill" else None,
        args=args,
        needs=needs,
        depends_on=list(dict.fromkeys([*previous, *declared, *needs])),
        continue_on_error=item.get("continue_on_error") is True,
    )


def _steps_read(args: Any) -> list[str]:
    """The steps ``args`` reads (``{{steps.X…}}``), each once, in order of first reference."""
    return list(dict.fromkeys(ref.split(".")[1] for ref in references(args) if ref.split(".")[0] == "steps"))


def _check_refs(
    value: Any,
    key: str,
    earlier: set[str],
    inputs: set[str],
    path: str,
    diags: list[Diagnostic],
    *,
    graph: bool = False,
) -> bool:
    for ref in references(value):
        head, name = ref.split(".")[:2]
        if head == "steps" and name not in earlier:
            where = "a step of this workflow" if graph else "an earlier step"
            diags.append(Diagnostic(file=path, key=key, problem=f"{{{{{ref}}}}} does not name {where}"))
            return False
        if head == "inputs" and name not in inputs:
            diags.append(Diagnostic(file=path, key=key, problem=f"{{{{{ref}}}}} names an undeclared input"))
            return False
    return True


def find_cycles(workflows: Mapping[str, Workflow]) -> dict[str, list[str]]:
    """Workflows that reach themselves through sub-workflow steps, each with one cycle path."""
    cycles: dict[str, list[str]] = {}
    for start in workflows:
        # Depth-first search from ``start`` looking for a way back to it.
        stack: list[tuple[str, list[str]]] = [(start, [start])]
        seen: set[str] = set()
        while stack:
            node, trail = stack.pop()
            wf = workflows.get(node)
            if wf is None:
                continue
            for child in wf.sub_workflows:
                if child == start:
                    cycles[start] = [*trail, child]
                    stack.clear()
                    break
                if child not in seen:
                    seen.add(child)
                    stack.append((child, [*trail, child]))
    return cycles
