"""What the git service does on the host, outside the sandbox: the user's global identity read
with git (no repository, global files only), and the walk that finds a symlink on the way to a
worktree path (a worktree is never created through one).
"""

from __future__ import annotations

import asyncio
import os
import stat
from collections.abc import Mapping
from pathlib import PurePosixPath
from typing import Final

__all__ = ["first_link", "global_identity", "within"]

#: How long reading the user's global identity on the host may take.
_IDENTITY_TIMEOUT_S: Final = 10.0


def within(path: str, base: str) -> bool:
    """Whether ``path`` is ``base`` or lies under it (by path components, nothing resolved)."""
    p, b = PurePosixPath(path).parts, PurePosixPath(base).parts
    return p[: len(b)] == b


def first_link(root: str, rel: str) -> str | None:
    """The first component of ``root/rel`` (below ``root``) that is a symlink or not a directory,
    walking with directory descriptors (``O_NOFOLLOW``); ``None`` when every existing one is a
    real directory (a missing one ends the walk: git creates it, inside the sandbox)."""
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    here = root
    try:
        for name in PurePosixPath(rel).parts:
            here = os.path.join(here, name)
            try:
                st = os.stat(name, dir_fd=fd, follow_symlinks=False)
            except FileNotFoundError:
                return None
            if not stat.S_ISDIR(st.st_mode):
                return here
            try:
                nxt = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
            except OSError:  # swapped for a link since the stat
                return here
            os.close(fd)
            fd = nxt
    finally:
        os.close(fd)
    return None


async def global_identity(key: str, source_env: Mapping[str, str]) -> str:
    """The user's own global ``user.<key>`` (``""`` when unset), read on the host: git with no
    repository (working directory ``/``, no system layer), reading only the global files."""
    env = {k: v for k, v in source_env.items() if k in ("PATH", "HOME", "XDG_CONFIG_HOME")}
    env.update(GIT_CONFIG_NOSYSTEM="1", GIT_CEILING_DIRECTORIES="/", LC_ALL="C")
    try:
        proc = await asyncio.create_subprocess_exec(
            "git",
            "config",
            "--global",
            "--includes",
            "--get",
            f"user.{key}",
            cwd="/",
            env=env,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.DEVNULL,
        )
    except OSError:
        return ""
    try:
        out, _ = await asyncio.wait_for(proc.communicate(), _IDENTITY_TIMEOUT_S)
    except TimeoutError:
        return ""
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    return out.decode("utf-8", "replace").strip() if proc.returncode == 0 else ""
