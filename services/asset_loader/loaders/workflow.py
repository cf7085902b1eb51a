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

Compilation checks ids, kinds, that every ``{{steps.X…}}`` names an
*earlier* step and every ``{{inputs.Y}}`` a declared input. Cycles through
sub-workflows are found across the whole generation by :func:`find_cycles`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Final

from pydantic import ValidationError

from jidocode.services.asset_loader.models import StepKind, Workflow, WorkflowInput, WorkflowStep
from jidocode.services.asset_loader.safe_yaml import YamlError, load_yaml
from jidocode.services.asset_loader.text import (
    decode_text,
    jsonable,
    name_problem,
    split_frontmatter,
)
from jidocode.shared.settings import Diagnostic

__all__ = ["MAX_STEPS", "REF", "find_cycles", "parse_workflow", "references"]

MAX_STEPS: Final = 200
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
    body = ""
    definition: Any
    if path.endswith((".yaml", ".yml")):
        try:
            definition = load_yaml(text)
        except YamlError as exc:
            diags.append(Diagnostic(file=path, problem=str(exc)))
            return None, diags
    else:
        definition, body, fm_diags = split_frontmatter(text, path)
        diags.extend(fm_diags)
        if definition is None:
            return None, diags
    if not isinstance(definition, dict):
        diags.append(Diagnostic(file=path, problem="workflow definition must be a mapping"))
        return None, diags
    if any(not isinstance(k, str) for k in definition):
        diags.append(Diagnostic(file=path, problem="workflow keys must be strings"))
        return None, diags
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
    if not isinstance(outputs, dict) or any(not isinstance(k, str) for k in outputs):
        diags.append(Diagnostic(file=path, key="outputs", problem="must be a mapping of names to templates"))
        return None, diags
    if not _check_refs(outputs, "outputs", {s.id for s in steps}, {i.name for i in inputs}, path, diags):
        return None, diags
    try:
        workflow = Workflow(
            name=name,
            description=description,
            inputs=inputs,
            steps=steps,
            outputs=jsonable(outputs) or {},
            body=body,
            path=path,
            layer=layer,
        )
    except ValidationError as exc:
        diags.append(Diagnostic(file=path, problem=str(exc.errors()[0]["msg"])))
        return None, diags
    return workflow, diags


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


def _steps(value: Any, path: str, inputs: set[str], diags: list[Diagnostic]) -> list[WorkflowStep] | None:
    if not isinstance(value, list) or not value:
        diags.append(Diagnostic(file=path, key="steps", problem="a workflow needs a non-empty list of steps"))
        return None
    if len(value) > MAX_STEPS:
        diags.append(Diagnostic(file=path, key="steps", problem=f"more than {MAX_STEPS} steps"))
        return None
    steps: list[WorkflowStep] = []
    ids: set[str] = set()
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
        kinds = [k for k in _KINDS if k in item]
        if len(kinds) != 1:
            diags.append(
                Diagnostic(
                    file=path, key=key, problem="a step needs exactly one of tool, command, skill, workflow"
                )
            )
            return None
        kind: StepKind = kinds[0]
        target = item[kind]
        if not isinstance(target, str) or not target:
            diags.append(Diagnostic(file=path, key=f"{key}.{kind}", problem="must be a name"))
            return None
        route = item.get("route")
        if kind == "skill" and not isinstance(route, str):
            diags.append(Diagnostic(file=path, key=f"{key}.route", problem="a skill step needs a route"))
            return None
        args = jsonable(item.get("args", item.get("with")))
        if not _check_refs(args, f"{key}.args", ids, inputs, path, diags):
            return None
        needs: list[str] = []
        for ref in references(args):
            parts = ref.split(".")
            if parts[0] == "steps" and parts[1] not in needs:
                needs.append(parts[1])
        steps.append(
            WorkflowStep(
                id=step_id,
                kind=kind,
                target=target,
                route=route if kind == "skill" else None,
                args=args,
                needs=needs,
                continue_on_error=item.get("continue_on_error") is True,
            )
        )
        ids.add(step_id)
    return steps


def _check_refs(
    value: Any, key: str, earlier: set[str], inputs: set[str], path: str, diags: list[Diagnostic]
) -> bool:
    for ref in references(value):
        head, name = ref.split(".")[:2]
        if head == "steps" and name not in earlier:
            diags.append(
                Diagnostic(file=path, key=key, problem=f"{{{{{ref}}}}} does not name an earlier step")
            )
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
