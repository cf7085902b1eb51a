"""One immutable generation of a project's assets, compiled from source files (pure).

``compile_generation`` parses every :class:`SourceFile` with its loader,
applies layer precedence (a later layer replaces an earlier asset of the same
name; a ``.claude`` asset replaced by a ``.jido`` one is a warning naming both), links workflows (unknown targets are warnings, sub-workflow cycles are
errors that drop the workflows involved) and builds the skill-graph snapshot.

Trust: the settings come from ``load_settings``, which reads the user's trust
store; when the project is not trusted, the hooks a project skill declares in
its frontmatter (``jido.hooks``) are dropped with a warning, like the hooks
of the project's settings.json (switching a hook off is kept: it only
restricts).
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from jidocode.shared.settings import UNTRUSTED_IGNORED, Diagnostic, LoadedSettings, Settings

from .discover import SourceFile, read_layers
from .layout import layers as layer_list
from .loaders.command import parse_command
from .loaders.graph import GraphSnapshot, build_graph, parse_graph_node
from .loaders.skill import parse_skill
from .loaders.workflow import find_cycles, parse_workflow
from .models import CommandAsset, GraphNode, Skill, SkillHooks, Workflow
from .text import decode_text

__all__ = ["Generation", "clear_parse_cache", "compile_generation", "load_generation"]

#: Parsed files by content: a reload re-parses only files whose bytes changed.
#: Values are immutable models, so generations can share them.
_CACHE: dict[tuple[Any, ...], tuple[Any, list[Diagnostic]]] = {}
MAX_CACHE_ENTRIES = 50_000


def clear_parse_cache() -> None:
    """Forget every parsed file (benchmarks of cold loads; tests)."""
    _CACHE.clear()


def _parse(src: SourceFile) -> tuple[Any, list[Diagnostic]]:
    assert src.raw is not None
    key = (src.kind, src.path, src.stem, src.layer, tuple(src.scripts), src.raw)
    hit = _CACHE.get(key)
    if hit is not None:
        return hit
    result: tuple[Any, list[Diagnostic]]
    if src.kind == "skill":
        result = parse_skill(src.raw, path=src.path, folder=src.stem, layer=src.layer, scripts=src.scripts)
    elif src.kind == "command":
        result = parse_command(src.raw, path=src.path, stem=src.stem, layer=src.layer)
    elif src.kind == "workflow":
        result = parse_workflow(src.raw, path=src.path, stem=src.stem, layer=src.layer)
    elif src.kind == "graph":
        result = parse_graph_node(src.raw, path=src.path, node_id=src.stem, layer=src.layer)
    else:
        result = decode_text(src.raw, src.path)
    if len(_CACHE) >= MAX_CACHE_ENTRIES:
        _CACHE.clear()
    _CACHE[key] = result
    return result


class Generation(BaseModel):
    """Everything a project's assets are at one moment; never mutated, only replaced."""

    model_config = ConfigDict(frozen=True)

    number: int = 0
    loaded_at: str = ""
    root: str | None = None
    skills: dict[str, Skill] = Field(default_factory=dict)
    commands: dict[str, CommandAsset] = Field(default_factory=dict)
    workflows: dict[str, Workflow] = Field(default_factory=dict)
    graph: GraphSnapshot = Field(default_factory=GraphSnapshot)
    #: JIDO.md texts, lowest layer first.
    memory: list[tuple[str, str]] = Field(default_factory=list)
    settings: Settings = Field(default_factory=Settings)
    settings_files: list[str] = Field(default_factory=list)
    #: Whether the project's own settings, hooks and MCP servers count (``None``: no project).
    trusted: bool | None = None
    diagnostics: list[Diagnostic] = Field(default_factory=list)

    @property
    def counts(self) -> dict[str, int]:
        return {
            "skill": len(self.skills),
            "command": len(self.commands),
            "workflow": len(self.workflows),
            "graph_node": len(self.graph.nodes),
        }


def _put(
    table: dict[str, Any],
    seen_in_layer: dict[tuple[str, str], str],
    name: str,
    asset: Any,
    src: SourceFile,
    diags: list[Diagnostic],
    origins: dict[str, SourceFile],
) -> None:
    """Put ``asset`` under ``name`` (``kind:name``), replacing a lower layer's; a duplicate in
    one folder is ignored, and a ``.claude`` asset a ``.jido`` one replaces is reported."""
    key = (src.layer, name)
    if (
        key in seen_in_layer
        and seen_in_layer[key] != src.path
        and Path(seen_in_layer[key]).parent == Path(src.path).parent
    ):
        diags.append(
            Diagnostic(
                file=src.path,
                key="name",
                problem=f"{name!r} is already defined by {seen_in_layer[key]}, ignored",
            )
        )
        return
    previous = origins.get(name)
    if (
        previous is not None
        and previous.flavor == "claude"
        and src.flavor == "jido"
        and src.layer == "project"
    ):
        diags.append(_clash(name, loser=previous, winner=src))
    seen_in_layer[key] = src.path
    origins[name] = src
    table[name] = asset


def _clash(name: str, *, loser: SourceFile, winner: SourceFile) -> Diagnostic:
    """The warning for a ``.claude`` asset a ``.jido`` asset of the same name replaces."""
    kind, bare = name.split(":", 1)
    return Diagnostic(
        file=loser.path,
        key="name",
        problem=f"{kind} {bare!r} is also defined by {winner.path}, which wins (.jido over .claude): "
        "this one is not used",
        severity="warning",
    )


def compile_generation(
    sources: Iterable[SourceFile],
    settings: LoadedSettings | None = None,
    *,
    number: int = 0,
    root: str | None = None,
) -> Generation:
    loaded = settings or LoadedSettings(settings=Settings())
    diags: list[Diagnostic] = list(loaded.diagnostics)
    skills: dict[str, Skill] = {}
    commands: dict[str, CommandAsset] = {}
    workflows: dict[str, Workflow] = {}
    nodes: dict[str, GraphNode] = {}
    memory: list[tuple[str, str]] = []
    seen: dict[tuple[str, str], str] = {}
    origins: dict[str, SourceFile] = {}
    for src in sources:
        diags.extend(src.diagnostics)
        if src.raw is None:
            continue
        value, d = _parse(src)
        diags.extend(d)
        if value is None:
            continue
        if src.kind == "skill":
            _put(skills, seen, f"skill:{value.name}", value, src, diags, origins)
        elif src.kind == "command":
            _put(commands, seen, f"command:{value.name}", value, src, diags, origins)
        elif src.kind == "workflow":
            _put(workflows, seen, f"workflow:{value.name}", value, src, diags, origins)
        elif src.kind == "graph":
            nodes[value.id] = value
        else:
            memory.append((src.path, value))
    skills = {k.split(":", 1)[1]: v for k, v in skills.items()}
    if loaded.trusted is False:
        skills = {name: _untrusted_hooks(skill, root, diags) for name, skill in skills.items()}
    commands = {k.split(":", 1)[1]: v for k, v in commands.items()}
    workflows = {k.split(":", 1)[1]: v for k, v in workflows.items()}
    workflows = _link(workflows, skills, commands, diags)
    return Generation(
        number=number,
        loaded_at=datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z"),
        root=root,
        skills=dict(sorted(skills.items())),
        commands=dict(sorted(commands.items())),
        workflows=dict(sorted(workflows.items())),
        graph=build_graph(list(nodes.values())),
        memory=memory,
        settings=loaded.settings,
        settings_files=list(loaded.files),
        trusted=loaded.trusted,
        diagnostics=diags,
    )


def _untrusted_hooks(skill: Skill, root: str | None, diags: list[Diagnostic]) -> Skill:
    """A project skill of an untrusted project keeps only the hooks it switches off."""
    if skill.layer != "project":
        return skill
    kept: dict[str, Any] = {}
    for phase in ("pre", "post"):
        hook = getattr(skill.hooks, phase)
        if hook is None:
            continue
        if not hook.enabled:
            kept[phase] = hook
            continue
        diags.append(
            Diagnostic(
                file=skill.path,
                key=f"jido.hooks.{phase}",
                problem=f"{UNTRUSTED_IGNORED}, so its hook definitions do not run "
                f"(run `jidocode projects trust {root or '<root>'}`)",
                severity="warning",
            )
        )
    if len(kept) == sum(getattr(skill.hooks, p) is not None for p in ("pre", "post")):
        return skill
    return skill.model_copy(update={"hooks": SkillHooks(**kept)})


def _link(
    workflows: dict[str, Workflow],
    skills: dict[str, Skill],
    commands: dict[str, CommandAsset],
    diags: list[Diagnostic],
) -> dict[str, Workflow]:
    for wf in workflows.values():
        for step in wf.steps:
            missing = None
            if step.kind == "workflow" and step.target not in workflows:
                missing = f"sub-workflow {step.target!r}"
            elif step.kind == "command" and step.target not in commands:
                missing = f"command {step.target!r}"
            elif step.kind == "skill":
                skill = skills.get(step.target)
                if skill is None:
                    missing = f"skill {step.target!r}"
                elif step.route and skill.action_for(step.route) is None:
                    missing = f"route {step.route!r} of skill {step.target!r}"
            if missing:
                diags.append(
                    Diagnostic(
                        file=wf.path, key=f"steps.{step.id}", problem=f"unknown {missing}", severity="warning"
                    )
                )
    cycles = find_cycles(workflows)
    for name, trail in cycles.items():
        diags.append(
            Diagnostic(
                file=workflows[name].path,
                key="steps",
                problem=f"sub-workflow cycle: {' -> '.join(trail)}, not loaded",
            )
        )
    return {name: wf for name, wf in workflows.items() if name not in cycles}


def load_generation(
    root: Path | None, *, data_dir: str = ".jido", jido_home: Path | None = None, number: int = 0
) -> Generation:
    """Read every layer of ``root`` from disk and compile a generation (the I/O entry point)."""
    from jidocode.shared.settings import load_settings

    settings = load_settings(root, jido_home=jido_home, data_dir=data_dir)
    sources = read_layers(layer_list(root, data_dir=data_dir, jido_home=jido_home))
    return compile_generation(sources, settings, number=number, root=str(root) if root is not None else None)
