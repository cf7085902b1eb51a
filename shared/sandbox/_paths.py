"""Which paths the sandbox protects, hides and lets the command read (pure, except :func:`read_cover`).

Protected paths are files that run later in the user's own tools, or decide
how git and JidoCode behave: a command may read them, never create or change
them. They are named relative to the project root.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable
from pathlib import PurePosixPath
from typing import Final

__all__ = ["PROC_READABLE", "PROTECTED", "hidden_paths", "protected_rels", "read_cover", "within"]

#: Protected paths under the project root (the data dir is added by :func:`protected_rels`).
PROTECTED: Final[tuple[str, ...]] = (
    ".git/hooks",
    ".git/config",
    # git reads its configuration from the common dir, and from config.worktree, too
    ".git/commondir",
    ".git/config.worktree",
    ".gitmodules",
    ".jido_code",
    ".mcp.json",
    ".vscode",
    ".envrc",
    ".husky",
    ".github/workflows",
    ".claude",
)

#: What of ``/proc`` a Landlock-sandboxed command may read: system-wide files only. The
#: ``/proc/<pid>`` directories stay closed (another process's ``environ`` is readable by
#: the same user under Landlock; with bubblewrap the command has a ``/proc`` of its own).
PROC_READABLE: Final[tuple[str, ...]] = (
    "/proc/cpuinfo",
    "/proc/meminfo",
    "/proc/stat",
    "/proc/loadavg",
    "/proc/uptime",
    "/proc/version",
    "/proc/filesystems",
    "/proc/sys",
)


def within(path: str, base: str) -> bool:
    """Whether ``path`` is ``base`` or under it (by components; both absolute and normalised)."""
    p, b = PurePosixPath(path).parts, PurePosixPath(base).parts
    return len(p) >= len(b) and p[: len(b)] == b


def protected_rels(data_dir: str = ".jido") -> tuple[str, ...]:
    """The protected paths relative to the root: :data:`PROTECTED` plus the project's data dir."""
    data = os.path.normpath(data_dir)
    if data in (".", "") or data.startswith(".."):
        return PROTECTED
    return (*PROTECTED, data) if data not in PROTECTED else PROTECTED


def hidden_paths(
    *, home: str | None, jido_home: str | None, data_home: str | None, secrets: Iterable[str] = ()
) -> tuple[str, ...]:
    """Absolute paths the command must not see: the home, the global layer, the data home, secrets.

    Relative or empty values and ``/`` are dropped (hiding ``/`` would hide
    everything); the result is sorted and without duplicates.
    """
    out: set[str] = set()
    for p in (home, jido_home, data_home, *secrets):
        if p and os.path.isabs(p):
            norm = os.path.normpath(p)
            if norm != "/":
                out.add(norm)
    return tuple(sorted(out))


def read_cover(hidden: Iterable[str], top: str = "/") -> list[str]:
    """The fewest trees that cover everything under ``top`` except the ``hidden`` paths and ``/proc``.

    Landlock grants rights beneath a directory and cannot take a subtree out,
    so a hidden path is left out by granting each of its siblings instead,
    level by level. Symlinks are skipped (their target is covered where it
    lives); what cannot be listed is left out.
    """
    hide = {os.path.realpath(h) for h in hidden} | {"/proc"}
    out: list[str] = []

    def walk(d: str) -> None:
        if d in hide:
            return
        if not any(within(h, d) for h in hide):
            out.append(d)
            return
        try:
            names = sorted(os.listdir(d))
        except OSError:
            return
        for name in names:
            p = os.path.join(d, name)
            try:
                st = os.lstat(p)
            except OSError:
                continue
            if stat.S_ISLNK(st.st_mode):
                continue
            walk(p)

    walk(os.path.normpath(top))
    return out
