"""Where the checkpoints live and how much disk they take (light: ``doctor`` imports it)."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from jidocode.shared.config import default_data_home

__all__ = ["checkpoints_home", "describe_use", "disk_use"]


def checkpoints_home(data_home: Path | None = None) -> Path:
    """``<data home>/checkpoints``: where every project's shadow repository lives."""
    return (data_home or default_data_home()) / "checkpoints"


def disk_use(home: Path) -> tuple[int, int]:
    """Bytes under ``home`` (the checkpoints home) and how many projects have a store there."""
    total = 0
    for base, _dirs, files in os.walk(home):
        for name in files:
            try:
                total += os.lstat(os.path.join(base, name)).st_size
            except OSError:
                continue
    try:
        stores = sum(1 for entry in os.scandir(home) if entry.name.endswith(".git"))
    except OSError:
        stores = 0
    return total, stores


def describe_use(data_home: Path, format_bytes: Callable[[int], str]) -> str:
    """``checkpoints: 1.2 MiB in 3 project(s)`` (``none yet`` when there are none)."""
    total, stores = disk_use(checkpoints_home(data_home))
    return f"checkpoints: {format_bytes(total)} in {stores} project(s)" if stores else "checkpoints: none yet"
