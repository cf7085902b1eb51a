"""The only I/O of loading: find asset files in each layer and read their bytes.

Rules, each violation a :class:`Diagnostic` naming the file:

* a file (or the folder holding it) whose real path resolves outside its
  layer (a symlink pointing elsewhere) is not read;
* a file larger than :data:`MAX_ASSET_BYTES` is not read (``stat`` first);
* at most :data:`MAX_FILES_PER_KIND` files of each kind per layer;
* a project layer whose folder resolves outside the project root is not read at all.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Final, Literal

from pydantic import BaseModel, ConfigDict, Field

from jidocode.shared.settings import Diagnostic

from .layout import Layer
from .text import MAX_ASSET_BYTES

__all__ = ["MAX_FILES_PER_KIND", "MAX_GRAPH_DEPTH", "MAX_SCRIPTS", "SourceFile", "read_layer", "read_layers"]

MAX_FILES_PER_KIND: Final = 5000
MAX_SCRIPTS: Final = 200
MAX_GRAPH_DEPTH: Final = 8

SourceKind = Literal["skill", "command", "workflow", "graph", "memory"]


class SourceFile(BaseModel):
    """One asset file as read from disk (or not read, with the reason in ``diagnostics``)."""

    model_config = ConfigDict(frozen=True)

    kind: SourceKind
    layer: Literal["global", "project"]
    path: str
    #: The name the file's location gives it: the skill folder, the command/workflow
    #: file stem, the graph node id.
    stem: str
    raw: bytes | None = None
    scripts: list[str] = Field(default_factory=list)
    #: The layer's flavor: ``claude`` for a file of Claude Code's ``.claude/``.
    flavor: Literal["jido", "claude"] = "jido"
    diagnostics: list[Diagnostic] = Field(default_factory=list)


def _inside(path: Path, base: Path, base_real: Path) -> bool:
    """Whether ``path`` (symlinks resolved) is ``base_real`` or below it.

    Fast path: when no component between the layer folder and the file is a
    symlink, the file is inside (the layer folder itself may be a symlink).
    """
    current = str(base)
    try:
        rel_parts = path.relative_to(base).parts
    except ValueError:
        rel_parts = ()
    if rel_parts and not any(os.path.islink(current := os.path.join(current, part)) for part in rel_parts):
        return True
    real = os.path.realpath(path)
    root = str(base_real)
    return real == root or real.startswith(root.rstrip(os.sep) + os.sep)


def _read(
    kind: SourceKind, layer: Layer, path: Path, stem: str, base_real: Path, scripts: list[str] | None = None
) -> SourceFile:
    file = str(path)
    if not _inside(path, layer.path, base_real):
        diag = Diagnostic(file=file, problem="resolves outside its layer (symlink?), not read")
        return SourceFile(kind=kind, layer=layer.name, path=file, stem=stem, diagnostics=[diag])
    try:
        # O_NONBLOCK: a FIFO named like an asset must not hang the reload.
        fd = os.open(file, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
        with open(fd, "rb", closefd=True) as handle:
            info = os.fstat(handle.fileno())
            if not stat.S_ISREG(info.st_mode):
                diag = Diagnostic(file=file, problem="not a regular file, not read")
                return SourceFile(kind=kind, layer=layer.name, path=file, stem=stem, diagnostics=[diag])
            size = info.st_size  # the size cap is checked before reading
            if size > MAX_ASSET_BYTES:
                diag = Diagnostic(file=file, problem=f"file is larger than {MAX_ASSET_BYTES} bytes, not read")
                return SourceFile(kind=kind, layer=layer.name, path=file, stem=stem, diagnostics=[diag])
            raw = handle.read(MAX_ASSET_BYTES + 1)
        if len(raw) > MAX_ASSET_BYTES:  # grew between fstat and read
            diag = Diagnostic(file=file, problem=f"file is larger than {MAX_ASSET_BYTES} bytes, not read")
            return SourceFile(kind=kind, layer=layer.name, path=file, stem=stem, diagnostics=[diag])
    except OSError as exc:
        diag = Diagnostic(file=file, problem=f"cannot read: {exc.strerror or exc}")
        return SourceFile(kind=kind, layer=layer.name, path=file, stem=stem, diagnostics=[diag])
    return SourceFile(
        kind=kind, layer=layer.name, path=file, stem=stem, raw=raw, flavor=layer.flavor, scripts=scripts or []
    )


def _entries(folder: Path) -> list[os.DirEntry[str]]:
    try:
        with os.scandir(folder) as it:
            return sorted(it, key=lambda e: e.name)
    except OSError:
        return []


def _capped(
    kind: SourceKind, layer: Layer, folder: Path, entries: list[os.DirEntry[str]], out: list[SourceFile]
) -> list[os.DirEntry[str]]:
    if len(entries) > MAX_FILES_PER_KIND:
        diag = Diagnostic(
            file=str(folder), problem=f"more than {MAX_FILES_PER_KIND} {kind} entries, the rest ignored"
        )
        out.append(SourceFile(kind=kind, layer=layer.name, path=str(folder), stem="", diagnostics=[diag]))
        return entries[:MAX_FILES_PER_KIND]
    return entries


def _scripts(folder: Path) -> list[str]:
    scripts: list[str] = []
    base = folder / "scripts"
    if not base.is_dir():
        return scripts
    for dirpath, dirnames, filenames in os.walk(base):
        dirnames[:] = [d for d in dirnames if not d.startswith(".")]
        for name in filenames:
            scripts.append(str(Path(dirpath, name).relative_to(folder)))
            if len(scripts) >= MAX_SCRIPTS:
                return scripts
    return scripts


def _outside_root(layer: Layer, base_real: Path) -> SourceFile | None:
    """A project layer whose folder resolves outside the project root (a link out of it): the
    diagnostic that says it is not read; ``None`` when it is inside (or the layer is global)."""
    if layer.root is None:
        return None
    try:
        root_real = layer.root.resolve(strict=True)
    except (OSError, RuntimeError):
        root_real = layer.root
    if base_real == root_real or base_real.is_relative_to(root_real):
        return None
    diag = Diagnostic(
        file=str(layer.path), problem=f"resolves outside the project root (to {base_real}), not read"
    )
    return SourceFile(kind="memory", layer=layer.name, path=str(layer.path), stem="", diagnostics=[diag])


def _read_skills(layer: Layer, base_real: Path, out: list[SourceFile]) -> None:
    skills_dir = layer.path / "skills"
    for entry in _capped("skill", layer, skills_dir, _entries(skills_dir), out):
        if entry.name.startswith(".") or not entry.is_dir():
            continue
        folder = Path(entry.path)
        skill_md = folder / "SKILL.md"
        if not skill_md.is_file():
            if not (folder / "skill.md").is_file():
                diag = Diagnostic(
                    file=str(folder), problem="skill folder without SKILL.md", severity="warning"
                )
                out.append(
                    SourceFile(
                        kind="skill", layer=layer.name, path=str(folder), stem=entry.name, diagnostics=[diag]
                    )
                )
                continue
            skill_md = folder / "skill.md"
        out.append(_read("skill", layer, skill_md, entry.name, base_real, scripts=_scripts(folder)))


def _read_commands(layer: Layer, base_real: Path, out: list[SourceFile]) -> None:
    commands_dir = layer.path / "commands"
    for entry in _capped("command", layer, commands_dir, _entries(commands_dir), out):
        if entry.name.endswith(".md") and not entry.name.startswith(".") and entry.is_file():
            out.append(_read("command", layer, Path(entry.path), entry.name[:-3], base_real))


def _read_workflows(layer: Layer, base_real: Path, out: list[SourceFile]) -> None:
    workflows_dir = layer.path / "workflows"
    for entry in _capped("workflow", layer, workflows_dir, _entries(workflows_dir), out):
        name = entry.name
        if name.startswith(".") or not entry.is_file():
            continue
        for suffix in (".md", ".yaml", ".yml"):
            if name.endswith(suffix):
                out.append(_read("workflow", layer, Path(entry.path), name[: -len(suffix)], base_real))
                break


def _read_graph(layer: Layer, base_real: Path, out: list[SourceFile]) -> None:
    graph_dir = layer.path / "skill_graph"
    count = 0
    for dirpath, dirnames, filenames in os.walk(graph_dir):
        rel_dir = Path(dirpath).relative_to(graph_dir)
        if len(rel_dir.parts) >= MAX_GRAPH_DEPTH:
            dirnames[:] = []
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        for name in sorted(filenames):
            if not name.endswith(".md") or name.startswith("."):
                continue
            count += 1
            if count > MAX_FILES_PER_KIND:
                diag = Diagnostic(
                    file=str(graph_dir),
                    problem=f"more than {MAX_FILES_PER_KIND} graph notes, the rest ignored",
                )
                out.append(
                    SourceFile(
                        kind="graph", layer=layer.name, path=str(graph_dir), stem="", diagnostics=[diag]
                    )
                )
                return
            node_id = (rel_dir / name[:-3]).as_posix()
            out.append(_read("graph", layer, Path(dirpath, name), node_id, base_real))


def read_layer(layer: Layer) -> list[SourceFile]:
    """Every asset file of one layer (a missing layer folder is simply empty).

    A ``claude`` layer (Claude Code's ``.claude/``) gives its skills and commands only; its
    ``CLAUDE.md`` is read by the system prompt and its ``agents/`` by the conversation service.
    """
    out: list[SourceFile] = []
    try:
        base_real = layer.path.resolve(strict=True)
    except (OSError, RuntimeError):
        return out
    escaped = _outside_root(layer, base_real)
    if escaped is not None:
        return [escaped]
    if layer.flavor == "jido":
        memory = layer.path / "JIDO.md"
        if memory.is_file():
            out.append(_read("memory", layer, memory, "JIDO", base_real))
    _read_skills(layer, base_real, out)
    _read_commands(layer, base_real, out)
    if layer.flavor == "jido":
        _read_workflows(layer, base_real, out)
        _read_graph(layer, base_real, out)
    return out


def read_layers(layers: list[Layer]) -> list[SourceFile]:
    """Every asset file of every layer, lowest layer first."""
    out: list[SourceFile] = []
    for layer in layers:
        out.extend(read_layer(layer))
    return out
