"""SKILL.md (seed 001, and the public Agent Skills format) to :class:`Skill`.

Recognised frontmatter: ``name``, ``description``, ``version``,
``allowed-tools`` and the ``jido:`` block (``skill_module``, ``actions``,
``router``, ``hooks``). Every other key is kept in ``extra`` untouched, so
skills written for other assistants (``license``, ``metadata`` …) load.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Final

from pydantic import ValidationError

from jidocode.services.asset_loader.models import Skill, SkillAction, SkillHooks, SkillRoute
from jidocode.services.asset_loader.text import (
    decode_text,
    jsonable,
    name_problem,
    parse_tool_list,
    split_frontmatter,
)
from jidocode.shared.settings import Diagnostic, HookSettings, hook_bus_problem

__all__ = ["MAX_DESCRIPTION", "ROUTE", "parse_skill", "script_name"]

MAX_DESCRIPTION: Final = 1024
#: A route: ``/``-separated segments of letters, digits, ``_`` and ``-``.
ROUTE: Final = re.compile(r"^[A-Za-z0-9_\-]+(?:/[A-Za-z0-9_\-]+){0,15}$")
_CAMEL: Final = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")
_KNOWN: Final = {"name", "description", "version", "allowed-tools", "allowed_tools", "jido"}


def parse_skill(
    raw: bytes, *, path: str, folder: str, layer: str, scripts: list[str] | None = None
) -> tuple[Skill | None, list[Diagnostic]]:
    """Parse one SKILL.md. ``folder`` is the name of its directory, which must equal ``name``."""
    text, diags = decode_text(raw, path)
    if text is None:
        return None, diags
    fm, body, fm_diags = split_frontmatter(text, path)
    diags.extend(fm_diags)
    if fm is None:
        return None, diags
    if not fm:
        diags.append(Diagnostic(file=path, problem="no YAML frontmatter with name and description"))
        return None, diags

    name = fm.get("name")
    problem = name_problem(name, folder, "folder")
    if problem is not None:
        diags.append(Diagnostic(file=path, key="name", problem=problem))
        return None, diags
    name = folder  # checked equal above
    description = _description(fm.get("description"), path, diags)
    if description is None:
        return None, diags
    version = _version(fm.get("version"), path, diags)
    tools_key = "allowed-tools" if "allowed-tools" in fm else "allowed_tools"
    allowed, tool_diags = parse_tool_list(fm.get(tools_key), path, tools_key)
    diags.extend(tool_diags)
    jido = _jido(fm.get("jido"), path, diags, scripts or [])
    if jido is None:
        return None, diags
    extra = {k: jsonable(v) for k, v in fm.items() if k not in _KNOWN}
    skill = Skill(
        name=name,
        description=description,
        version=version,
        allowed_tools=allowed,
        skill_module=jido.module,
        actions=jido.actions,
        router=jido.router,
        hooks=jido.hooks,
        extra=extra,
        body=body,
        path=path,
        layer=layer,
        scripts=sorted(scripts or []),
    )
    return skill, diags


def _description(value: Any, path: str, diags: list[Diagnostic]) -> str | None:
    """The description (``""`` with a warning when missing); ``None`` when it is no string (an
    error: the skill is not loaded). Over :data:`MAX_DESCRIPTION` characters is a warning."""
    if value is None:
        diags.append(
            Diagnostic(file=path, key="description", problem="missing description", severity="warning")
        )
        return ""
    if not isinstance(value, str):
        diags.append(Diagnostic(file=path, key="description", problem="description must be a string"))
        return None
    if len(value) > MAX_DESCRIPTION:
        diags.append(
            Diagnostic(
                file=path,
                key="description",
                problem=f"longer than {MAX_DESCRIPTION} characters",
                severity="warning",
            )
        )
    return value


def _version(value: Any, path: str, diags: list[Diagnostic]) -> str | None:
    """The version as text (a number is written out); anything else is dropped with a warning."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, int | float):
        return str(value)
    diags.append(Diagnostic(file=path, key="version", problem="version must be a string", severity="warning"))
    return None


@dataclass(frozen=True)
class _JidoBlock:
    """What a skill's ``jido:`` frontmatter block declares (all empty when it has none)."""

    module: str | None = None
    actions: list[SkillAction] = field(default_factory=list)
    router: list[SkillRoute] = field(default_factory=list)
    hooks: SkillHooks = field(default_factory=SkillHooks)


def _jido(value: Any, path: str, diags: list[Diagnostic], scripts: list[str]) -> _JidoBlock | None:
    """The ``jido:`` block; ``None`` when it is no mapping (an error: the skill is not loaded). A
    bad part of it is left out with a diagnostic."""
    if value is None:
        return _JidoBlock()
    if not isinstance(value, dict):
        diags.append(Diagnostic(file=path, key="jido", problem="jido must be a mapping"))
        return None
    module = value.get("skill_module")
    if module is not None and not isinstance(module, str):
        diags.append(
            Diagnostic(file=path, key="jido.skill_module", problem="must be a string", severity="warning")
        )
        module = None
    actions = _actions(value.get("actions"), path, diags, scripts)
    return _JidoBlock(
        module=module,
        actions=actions,
        router=_router(value.get("router"), path, diags, actions),
        hooks=_hooks(value.get("hooks"), path, diags),
    )


def _kind(value: Any) -> str:
    return "nothing" if value is None else type(value).__name__


def _short(module: str) -> str:
    return module.rsplit(".", 1)[-1]


def script_name(action: str) -> str:
    """The script standing for an action module: ``ExtractPdfText`` -> ``scripts/extract_pdf_text.py``."""
    return f"scripts/{_CAMEL.sub('_', action).lower().replace('-', '_')}.py"


def _module_action(
    module: str, scripts: list[str], path: str, key: str, diags: list[Diagnostic]
) -> SkillAction:
    """A bare action module (seed 001 ``JidoCode.Actions.X``): its script when the skill has one."""
    name = _short(module)
    script = script_name(name)
    if script in scripts:
        return SkillAction(name=name, module=module, script=script)
    if "." in module:
        diags.append(
            Diagnostic(
                file=path,
                key=key,
                problem=f"action module {module!r} has no {script} in the skill folder: "
                f"the action runs as the tool named {name!r}",
                severity="warning",
            )
        )
    return SkillAction(name=name, module=module if "." in module else None)


def _actions(value: Any, path: str, diags: list[Diagnostic], scripts: list[str]) -> list[SkillAction]:
    if value is None:
        return []
    if not isinstance(value, list):
        diags.append(Diagnostic(file=path, key="jido.actions", problem="must be a list"))
        return []
    out: list[SkillAction] = []
    for i, item in enumerate(value):
        key = f"jido.actions[{i}]"
        if isinstance(item, str) and item:
            out.append(_module_action(item, scripts, path, key, diags))
        elif isinstance(item, dict):
            name = item.get("name")
            tool = item.get("tool")
            args = item.get("args", {})
            desc = item.get("description")
            if not isinstance(name, str) or not name:
                diags.append(Diagnostic(file=path, key=key, problem="action needs a string name"))
                continue
            if tool is not None and not isinstance(tool, str):
                diags.append(Diagnostic(file=path, key=f"{key}.tool", problem="must be a string"))
                continue
            if not isinstance(args, dict):
                diags.append(Diagnostic(file=path, key=f"{key}.args", problem="must be a mapping"))
                continue
            if tool is None and not args and desc is None:
                out.append(_module_action(name, scripts, path, key, diags))
                continue
            out.append(
                SkillAction(
                    name=_short(name),
                    module=name if "." in name else None,
                    tool=tool,
                    args=jsonable(args) or {},
                    description=desc if isinstance(desc, str) else None,
                )
            )
        else:
            diags.append(Diagnostic(file=path, key=key, problem="action must be a name or a mapping"))
    return out


def _router(value: Any, path: str, diags: list[Diagnostic], actions: list[SkillAction]) -> list[SkillRoute]:
    """``router`` as the seed writes it (a list of one-key maps) or as one mapping."""
    if value is None:
        return []
    pairs: list[tuple[Any, Any]] = []
    if isinstance(value, dict):
        pairs = list(value.items())
    elif isinstance(value, list):
        for i, item in enumerate(value):
            if isinstance(item, dict) and len(item) == 1:
                pairs.extend(item.items())
            else:
                diags.append(
                    Diagnostic(
                        file=path, key=f"jido.router[{i}]", problem='entry must be one "route": Action pair'
                    )
                )
    else:
        diags.append(Diagnostic(file=path, key="jido.router", problem="must be a list or a mapping"))
        return []
    known = {a.name for a in actions}
    out: list[SkillRoute] = []
    seen: set[str] = set()
    for route, action in pairs:
        if not isinstance(route, str) or not ROUTE.match(route):
            diags.append(Diagnostic(file=path, key="jido.router", problem=f"invalid route {route!r}"))
            continue
        if not isinstance(action, str) or not action:
            diags.append(Diagnostic(file=path, key=f"jido.router.{route}", problem="action must be a string"))
            continue
        if route in seen:
            diags.append(Diagnostic(file=path, key=f"jido.router.{route}", problem="route given twice"))
            continue
        seen.add(route)
        short = _short(action)
        if known and short not in known:
            diags.append(
                Diagnostic(
                    file=path,
                    key=f"jido.router.{route}",
                    problem=f"action {action!r} is not listed in jido.actions",
                    severity="warning",
                )
            )
        out.append(SkillRoute(path=route, action=short))
    return out


def _hooks(value: Any, path: str, diags: list[Diagnostic]) -> SkillHooks:
    if value is None:
        return SkillHooks()
    if not isinstance(value, dict):
        diags.append(Diagnostic(file=path, key="jido.hooks", problem="must be a mapping"))
        return SkillHooks()
    found: dict[str, HookSettings | None] = {}
    for phase, hook in value.items():
        key = f"jido.hooks.{phase}"
        if phase not in ("pre", "post"):
            diags.append(
                Diagnostic(
                    file=path, key=key, problem="only pre and post hooks exist, ignored", severity="warning"
                )
            )
            continue
        if not isinstance(hook, dict):
            diags.append(Diagnostic(file=path, key=key, problem="must be a mapping"))
            continue
        data = dict(hook)
        if data.get("enabled") is False and "signal_type" not in data:
            data["signal_type"] = "disabled"  # a switch-off needs no signal type
        try:
            settings = found[phase] = HookSettings.model_validate(jsonable(data))
        except ValidationError as exc:
            problem = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
            diags.append(Diagnostic(file=path, key=key, problem=problem))
            continue
        bus_problem = hook_bus_problem(settings.bus) if "bus" in data else None
        if bus_problem is not None:  # said, never silently ignored (decision 0163)
            diags.append(Diagnostic(file=path, key=f"{key}.bus", problem=bus_problem, severity="warning"))
    return SkillHooks(**found)
