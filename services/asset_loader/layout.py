"""Where assets live on disk: the layers and the project data-dir tree (seed 000 ``Layout``).

Layers, lowest first; a later layer overrides an earlier one by asset name::

    global     <jido_home>/                 (~/.jido_code, moved by JIDO_CODE_HOME)
    project    <root>/.claude/              (Claude Code's: skills/ and commands/ only)
    project    <root>/.jido_code/           (seed 001 spelling, read when present)
    project    <root>/<data_dir>/           (seed 000, default .jido; created on project start)

So a ``.jido`` asset wins over a ``.claude`` one of the same name (the generation reports
the clash). A project layer whose folder resolves outside the project root (a link) is not
read.
"""

from __future__ import annotations

import re
from pathlib import Path, PurePosixPath
from typing import Final, Literal

from pydantic import BaseModel, ConfigDict

from jidocode.shared.errors import InvalidInput
from jidocode.shared.nofollow import open_dir
from jidocode.shared.settings import global_home

__all__ = [
    "ASSET_DIRS",
    "CLAUDE_ASSET_DIRS",
    "CLAUDE_DIR",
    "LAYOUT_DIRS",
    "ROOT_INSTRUCTIONS",
    "Layer",
    "Layout",
    "ensure_layout",
    "layers",
    "paths",
]

#: Asset folders inside every JidoCode layer.
ASSET_DIRS: Final = ("skills", "commands", "workflows", "skill_graph")
#: Claude Code's project folder, read as the lowest project layer.
CLAUDE_DIR: Final = ".claude"
#: What JidoCode reads of ``.claude/`` (``agents/`` is read by the conversation service, and
#: watched here so a change reloads).
CLAUDE_ASSET_DIRS: Final = ("skills", "commands", "agents")
#: Instructions files in the project root, read into the system prompt (watched, not recursive).
ROOT_INSTRUCTIONS: Final = ("JIDO.md", "AGENTS.md", "CLAUDE.md")
#: Folders ``ensure_layout`` creates in the project data dir.
LAYOUT_DIRS: Final = (*ASSET_DIRS, "state")
_DATA_DIR: Final = re.compile(r"^[A-Za-z0-9_.\-]{1,64}$")


class Layer(BaseModel):
    model_config = ConfigDict(frozen=True)

    name: Literal["global", "project"]
    path: Path
    #: ``jido`` (every kind of asset) or ``claude`` (Claude Code's ``.claude/``: skills and
    #: commands, with ``CLAUDE.md`` and ``agents/`` watched).
    flavor: Literal["jido", "claude"] = "jido"
    #: The project root a project layer must resolve into (``None``: the global layer).
    root: Path | None = None

    def __str__(self) -> str:
        return f"{self.name}:{self.path}"


class Layout(BaseModel):
    """The project data-dir paths (seed 000 ``paths/2``)."""

    model_config = ConfigDict(frozen=True)

    root: Path
    data: Path
    skills: Path
    commands: Path
    workflows: Path
    skill_graph: Path
    state: Path


def _check_data_dir(data_dir: str) -> str:
    """A relative path inside the root (as the engine accepts it): no ``..``, not absolute."""
    pure = PurePosixPath(data_dir)
    if (
        not data_dir
        or pure.is_absolute()
        or ".." in pure.parts
        or not all(_DATA_DIR.match(part) for part in pure.parts)
        or pure == PurePosixPath(".")
    ):
        raise InvalidInput(
            f"invalid data dir {data_dir!r}: a relative path inside the project root expected",
            details={"data_dir": data_dir},
        )
    return data_dir


def paths(root: Path, data_dir: str = ".jido") -> Layout:
    data = root / _check_data_dir(data_dir)
    return Layout(
        root=root,
        data=data,
        skills=data / "skills",
        commands=data / "commands",
        workflows=data / "workflows",
        skill_graph=data / "skill_graph",
        state=data / "state",
    )


def ensure_layout(root: Path, data_dir: str = ".jido") -> Layout:
    """Create ``<root>/<data_dir>/{skills,commands,workflows,skill_graph,state}`` (idempotent).

    No link below ``root`` is followed (a repository's ``.jido`` could be a link to any folder of
    the user): such a component is ``UnsafePath`` naming it, and nothing is made through it.
    """
    layout = paths(root, data_dir)
    for name in LAYOUT_DIRS:
        with open_dir(root, (*PurePosixPath(data_dir).parts, name), create=True):
            pass
    return layout


def layers(root: Path | None, *, data_dir: str = ".jido", jido_home: Path | None = None) -> list[Layer]:
    """Every layer of ``root`` (``None``: global only), lowest first."""
    out = [Layer(name="global", path=global_home(jido_home))]
    if root is not None:
        out.append(Layer(name="project", path=root / CLAUDE_DIR, flavor="claude", root=root))
        out.append(Layer(name="project", path=root / ".jido_code", root=root))
        if _check_data_dir(data_dir) != ".jido_code":
            out.append(Layer(name="project", path=root / data_dir, root=root))
    return out
