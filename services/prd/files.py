"""A PRD's files under ``<root>/.daedalus/`` (seed 004 directory layout), written atomically.

STUB (interface fixed; the ``prd-core`` branch implements it).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from .model import Prd

__all__ = [
    "PrdPaths",
    "append_agent_log",
    "append_progress",
    "create_prd",
    "list_prds",
    "load_prd",
    "save_prd",
]


@dataclass(frozen=True)
class PrdPaths:
    root: Path
    name: str

    @property
    def dir(self) -> Path:
        return self.root / ".daedalus" / "prds" / self.name

    @property
    def prd_md(self) -> Path:
        return self.dir / "prd.md"

    @property
    def prd_json(self) -> Path:
        return self.dir / "prd.json"

    @property
    def progress_md(self) -> Path:
        return self.dir / "progress.md"

    @property
    def agent_log(self) -> Path:
        return self.dir / "agent.log"

    @property
    def events_jsonl(self) -> Path:
        return self.dir / "events.jsonl"

    @property
    def worktree(self) -> Path:
        return self.root / ".daedalus" / "worktrees" / self.name


def list_prds(root: Path) -> list[str]:
    raise NotImplementedError


def load_prd(path: Path) -> Prd:
    """``InvalidInput`` naming the file and the field (``userStories[1].title: …``)."""
    raise NotImplementedError


def save_prd(path: Path, prd: Prd) -> None:
    """Atomically: a temporary file beside it, fsync, rename."""
    raise NotImplementedError


def create_prd(paths: PrdPaths, prd: Prd) -> None:
    """``prd.md`` (from the PRD), ``prd.json``, an empty ``progress.md``; ``Conflict`` if it exists."""
    raise NotImplementedError


def append_progress(paths: PrdPaths, text: str) -> None:
    raise NotImplementedError


def append_agent_log(paths: PrdPaths, text: str) -> None:
    raise NotImplementedError
