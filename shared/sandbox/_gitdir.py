"""The project's git directory, held by an ``O_PATH`` descriptor and put back when a call moved it.

:func:`put_git_back`: a ``.git`` moved anywhere is moved back, one removed is replaced by an
empty repository with the original ``HEAD`` and config (its objects are lost; the config and
hooks are put back by :func:`._snapshot.repair`), and a removed ``HEAD``, ``objects`` or
``refs`` is put back, so git never takes the project for no repository and looks above the
root. :mod:`._guard` holds the directory while calls run (decision 0307).
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Final

from ._snapshot import DIR_FLAGS, File, create_at, lstat_at, remove_at

__all__ = ["GIT_SKELETON", "GitDir", "hold_git", "put_git_back"]


@dataclass
class GitDir:
    """The project's git directory as it was when the snapshot was taken.

    ``fd`` is an ``O_PATH`` descriptor of the directory itself: it follows the directory across
    a rename (``mv .git .git_moved``), so the original is found and brought back wherever the
    command put it inside the filesystem; ``head`` is its ``HEAD`` (put back if removed).
    """

    fd: int
    ident: tuple[int, int]
    head: bytes | None


def hold_git(root_fd: int) -> GitDir | None:
    """The root's ``.git`` directory (``None`` when it is missing, a file or a link)."""
    try:
        fd = os.open(".git", os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=root_fd)
    except OSError:
        return None
    st = os.fstat(fd)
    return GitDir(fd, (st.st_dev, st.st_ino), _small_file("HEAD", fd))


def _small_file(name: str, dirfd: int, limit: int = 4096) -> bytes | None:
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, dir_fd=dirfd)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        data = f.read(limit + 1)
    return data if len(data) <= limit else None


def _open_parent(path: str) -> tuple[int, str] | None:
    """A descriptor of the real directory holding absolute ``path`` (no link followed), and its last name."""
    parts = PurePosixPath(path).parts
    if len(parts) < 2 or parts[0] != "/":
        return None
    fd = os.open("/", DIR_FLAGS)
    for name in parts[1:-1]:
        try:
            nxt = os.open(name, DIR_FLAGS, dir_fd=fd)
        except OSError:
            os.close(fd)
            return None
        os.close(fd)
        fd = nxt
    return fd, parts[-1]


def _find_moved(git: GitDir) -> tuple[int, str] | None:
    """Where the original git directory is now (parent descriptor, name), or ``None`` if it was removed."""
    where = os.readlink(f"/proc/self/fd/{git.fd}")
    if where.endswith(" (deleted)"):
        return None
    found = _open_parent(where)
    if found is None:
        return None
    parent, name = found
    st = lstat_at(name, parent)
    if st is None or (st.st_dev, st.st_ino) != git.ident:
        os.close(parent)
        return None
    return found


def _make_empty_repository(root_fd: int, head: bytes | None) -> None:
    """``.git`` as ``git init`` makes it (its config and hooks are then put back by :func:`._snapshot.repair`)."""
    os.mkdir(".git", 0o755, dir_fd=root_fd)
    fd = os.open(".git", DIR_FLAGS, dir_fd=root_fd)
    try:
        for d in ("objects", "refs", "refs/heads", "refs/tags"):
            os.mkdir(d, 0o755, dir_fd=fd)
        create_at("HEAD", fd, File(head or b"ref: refs/heads/main\n", 0o644))
    finally:
        os.close(fd)


#: What makes the git directory a repository (watched too: a removal is put back at once).
GIT_SKELETON: Final = (".git/HEAD", ".git/objects", ".git/refs")


def _put_skeleton_back(git: GitDir) -> list[str]:
    """Put back what makes the git directory a repository (``HEAD``, ``objects``, ``refs``) if removed.

    Without them git takes the project for no repository and looks for one above the root.
    """
    fixed = []
    for name in ("objects", "refs"):
        if lstat_at(name, git.fd) is None:
            os.mkdir(name, 0o755, dir_fd=git.fd)
            fixed.append(f".git/{name}")
    if git.head is not None and lstat_at("HEAD", git.fd) is None:
        create_at("HEAD", git.fd, File(git.head, 0o644))
        fixed.append(".git/HEAD")
    return fixed


def put_git_back(root: str, git: GitDir) -> list[str]:
    """Undo a move, replacement or removal of the root's git directory; what had to be undone.

    Moved (anywhere the command could write, even inside a new ``.git``): the original is
    renamed to a free name in the root, whatever stands at ``.git`` is removed, and the original
    renamed back. Removed: its objects are lost, and an empty repository with the original
    ``HEAD`` takes its place, so git never goes looking for a repository above the root. A
    ``HEAD``, ``objects`` or ``refs`` removed from it is put back. ``git`` then holds the
    directory at ``.git``.
    """
    root_fd = os.open(root, DIR_FLAGS)
    try:
        st = lstat_at(".git", root_fd)
        if st is not None and (st.st_dev, st.st_ino) == git.ident:
            return _put_skeleton_back(git)
        moved = _find_moved(git)
        if moved is None:
            remove_at(".git", root_fd)
            _make_empty_repository(root_fd, git.head)
        else:
            parent, name = moved
            aside = f".git-restoring-{os.urandom(6).hex()}"
            try:
                os.rename(name, aside, src_dir_fd=parent, dst_dir_fd=root_fd)
            finally:
                os.close(parent)
            remove_at(".git", root_fd)
            os.rename(aside, ".git", src_dir_fd=root_fd, dst_dir_fd=root_fd)
        held = hold_git(root_fd)
        if held is not None:
            os.close(git.fd)
            git.fd, git.ident = held.fd, held.ident
        return [".git", *_put_skeleton_back(git)]
    finally:
        os.close(root_fd)
