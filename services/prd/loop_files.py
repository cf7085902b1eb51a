"""The PRD's own files in each story's commit (``commit_prd_files``, on by default).

Ralph commits its ``prd.json`` and progress with every story; so does this loop, so ``git status``
of the work dir is clean after a run: ``.daedalus/prds/<name>/prd.json``, ``progress.md`` and
``prd.md``, and ``.daedalus/.gitignore`` (which keeps the logs and events out), are staged with the
story's changes (:meth:`.git.GitRepo.commit_all` ``include``). Everything else under ``.daedalus/``
(another PRD's files, anything the agent put there) stays out, as before.

In the project root the files are where the loop keeps them. A worktree is another checkout: the
loop's copies (in the root) are written into the worktree at the same relative paths first, so the
PRD branch carries its plan and history. Both ends are reached without following a link
(:mod:`jidocode.shared.nofollow`): the worktree is content the agent wrote.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Final

from jidocode.shared.errors import NotFound
from jidocode.shared.nofollow import open_dir, open_read, replace_bytes

__all__ = ["MAX_COPY_BYTES", "PRD_FILES", "prd_file_paths", "stage_prd_files"]

#: The PRD's files committed with a story, in its directory.
PRD_FILES: Final = ("prd.json", "progress.md", "prd.md")
#: A file larger than this is not copied into a worktree (``progress.md`` rotates at 2 MiB).
MAX_COPY_BYTES: Final = 4 * 1024 * 1024


def prd_file_paths(name: str) -> list[tuple[tuple[str, ...], str]]:
    """``(directories, file)`` of each file committed with a story of PRD ``name``."""
    return [((".daedalus",), ".gitignore"), *(((".daedalus", "prds", name), f) for f in PRD_FILES)]


def _read(root: Path, dirs: tuple[str, ...], file: str) -> bytes | None:
    """The file's bytes (``None``: it does not exist or is larger than :data:`MAX_COPY_BYTES`)."""
    shown = root.joinpath(*dirs, file)
    try:
        with open_dir(root, dirs) as dfd:
            fd = open_read(dfd, file, shown=shown)
    except NotFound:
        return None
    with os.fdopen(fd, "rb") as fh:
        data = fh.read(MAX_COPY_BYTES + 1)
    return data if len(data) <= MAX_COPY_BYTES else None


def stage_prd_files(root: Path, work_dir: Path, name: str) -> tuple[str, ...]:
    """The PRD's files to commit with a story, as paths relative to ``work_dir``; copied there
    first when ``work_dir`` is a worktree (not ``root``). A file missing in the root is left out."""
    staged: list[str] = []
    same = os.path.realpath(root) == os.path.realpath(work_dir)
    for dirs, file in prd_file_paths(name):
        data = _read(root, dirs, file)
        if data is None:
            continue
        if not same:
            with open_dir(work_dir, dirs, create=True) as dfd:
                replace_bytes(dfd, file, data, shown=work_dir.joinpath(*dirs, file))
        staged.append("/".join((*dirs, file)))
    return tuple(staged)
