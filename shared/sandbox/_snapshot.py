"""Snapshots of protected paths, and the repair that puts them back (no link ever written through).

Before a call the protected paths are captured (:func:`capture`: missing, a symlink, a file
with its bytes, a directory with its tree, or only its kind when bubblewrap binds it
read-only); :func:`repair` removes whatever differs and puts the captured state back. The
repair walks from the root with ``O_NOFOLLOW`` directory descriptors, and removes a symlink or
file that took the place of a directory on the way, so it never writes through a link.
:mod:`._guard` decides when both run (decision 0307).
"""

from __future__ import annotations

import os
import shutil
import stat
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Final

__all__ = [
    "DIR_FLAGS",
    "MAX_BYTES",
    "MAX_ENTRIES",
    "Dir",
    "File",
    "Link",
    "Missing",
    "Node",
    "Present",
    "TooLarge",
    "capture",
    "create_at",
    "lstat_at",
    "remove_at",
    "repair",
]

#: What a snapshot of one project may hold before a Landlock call is refused.
MAX_BYTES: Final = 16 * 1024 * 1024
MAX_ENTRIES: Final = 4096
DIR_FLAGS: Final = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


@dataclass(frozen=True, slots=True)
class Missing:
    """Nothing there (or not reachable through real directories)."""


@dataclass(frozen=True, slots=True)
class Present:
    """A directory or file too large to capture: only its kind is known (bubblewrap binds it read-only)."""

    kind: str


@dataclass(frozen=True, slots=True)
class File:
    data: bytes
    mode: int


@dataclass(frozen=True, slots=True)
class Link:
    target: str


@dataclass(frozen=True, slots=True)
class Dir:
    mode: int
    children: tuple[tuple[str, Node], ...]


Node = Missing | Present | File | Link | Dir


class TooLarge(Exception):
    """A protected path holds more than the snapshot may (``args[0]``: its path)."""


@dataclass
class _Budget:
    bytes: int = MAX_BYTES
    entries: int = MAX_ENTRIES

    def spend(self, what: str, size: int) -> None:
        self.entries -= 1
        self.bytes -= size
        if self.entries < 0 or self.bytes < 0:
            raise TooLarge(what)


def _kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "dir"
    if stat.S_ISLNK(mode):
        return "link"
    return "file" if stat.S_ISREG(mode) else "other"


def lstat_at(name: str, dirfd: int) -> os.stat_result | None:
    """``name`` in ``dirfd`` as it is (no link followed); ``None`` when missing or not reachable."""
    try:
        return os.stat(name, dir_fd=dirfd, follow_symlinks=False)
    except FileNotFoundError:
        return None
    except NotADirectoryError:
        return None


def _node(name: str, dirfd: int, budget: _Budget, what: str) -> Node:
    st = lstat_at(name, dirfd)
    if st is None:
        return Missing()
    if stat.S_ISLNK(st.st_mode):
        target = os.readlink(name, dir_fd=dirfd)
        budget.spend(what, len(target))
        return Link(target)
    if stat.S_ISREG(st.st_mode):
        budget.spend(what, st.st_size)
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dirfd)
        with os.fdopen(fd, "rb") as f:
            data = f.read(st.st_size + 1)
        budget.spend(what, max(0, len(data) - st.st_size))
        return File(data, stat.S_IMODE(st.st_mode))
    if stat.S_ISDIR(st.st_mode):
        budget.spend(what, 0)
        fd = os.open(name, DIR_FLAGS, dir_fd=dirfd)
        try:
            children = tuple(
                (child, _node(child, fd, budget, f"{what}/{child}")) for child in sorted(os.listdir(fd))
            )
        finally:
            os.close(fd)
        return Dir(stat.S_IMODE(st.st_mode), children)
    return Present(_kind(st.st_mode))  # a device, socket or fifo: kept as it is


def _expand(root: str, rels: tuple[str, ...]) -> list[str]:
    """``rels``, plus each symlink on the way to one of them and the place that symlink leads to.

    A repository may itself have ``.github -> ci/github``: the link is kept as
    it is (a change to it is undone), and the protected path is followed to
    ``ci/github/workflows`` when that is inside the root.
    """
    out: list[str] = []
    for rel in rels:
        out.append(rel)
        parts = PurePosixPath(rel).parts
        for i in range(1, len(parts)):
            ancestor = os.path.join(root, *parts[:i])
            if os.path.islink(ancestor):
                out.append("/".join(parts[:i]))
                real = os.path.realpath(os.path.join(root, rel))
                if real != root and _within(real, root):
                    out.append(os.path.relpath(real, root))
                break
    return list(dict.fromkeys(out))


def _within(path: str, base: str) -> bool:
    p, b = PurePosixPath(path).parts, PurePosixPath(base).parts
    return p[: len(b)] == b


def capture(root: str, rels: tuple[str, ...], *, full: bool = True) -> dict[str, Node]:
    """The state of each protected ``rel`` under ``root`` (and of the symlinks on the way to one).

    ``full``: files with their bytes and directories with their trees (raises
    :class:`TooLarge`); else a directory or file is recorded as
    :class:`Present` (bubblewrap binds it read-only: only its kind matters).
    A protected path behind a symlink is not recorded itself: the link is, and
    so is where it leads inside the root (:func:`_expand`).
    """
    out: dict[str, Node] = {}
    root_fd = os.open(root, DIR_FLAGS)
    try:
        for rel in _expand(root, rels):
            parts = PurePosixPath(rel).parts
            fd = os.dup(root_fd)
            try:
                blocked: str | None = None
                for name in parts[:-1]:
                    st = lstat_at(name, fd)
                    if st is None or not stat.S_ISDIR(st.st_mode):
                        blocked = "link" if st is not None and stat.S_ISLNK(st.st_mode) else "missing"
                        break
                    nxt = os.open(name, DIR_FLAGS, dir_fd=fd)
                    os.close(fd)
                    fd = nxt
                if blocked == "link":
                    continue
                if blocked == "missing":
                    out[rel] = Missing()
                    _keep_file_in_the_way(out, parts, root_fd)
                    continue
                st = lstat_at(parts[-1], fd)
                if not full and st is not None and not stat.S_ISLNK(st.st_mode):
                    out[rel] = Present(_kind(st.st_mode))
                else:
                    out[rel] = _node(parts[-1], fd, _Budget(), rel)
            finally:
                os.close(fd)
    finally:
        os.close(root_fd)
    return out


def _keep_file_in_the_way(out: dict[str, Node], parts: tuple[str, ...], root_fd: int) -> None:
    """Record a regular file that stands where a protected path's parent directory would be.

    A git worktree's ``.git`` is such a file (``gitdir: …``): ``.git/hooks`` cannot exist under
    it, and the repair must not take the file for one planted in the way. Recorded with its
    bytes, it is left alone when unchanged and put back when a command changed it.
    """
    fd = os.dup(root_fd)
    try:
        for i, name in enumerate(parts[:-1]):
            st = lstat_at(name, fd)
            if st is None:
                return
            if stat.S_ISREG(st.st_mode):
                rel = "/".join(parts[: i + 1])
                if rel not in out:
                    try:
                        out[rel] = _node(name, fd, _Budget(), rel)
                    except TooLarge:
                        return
                return
            if not stat.S_ISDIR(st.st_mode):
                return
            nxt = os.open(name, DIR_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = nxt
    finally:
        os.close(fd)


def remove_at(name: str, dirfd: int) -> None:
    """Remove ``name`` in ``dirfd`` (a directory with its tree, a link itself); nothing if missing."""
    st = lstat_at(name, dirfd)
    if st is None:
        return
    if stat.S_ISDIR(st.st_mode):
        shutil.rmtree(name, dir_fd=dirfd)
    else:
        os.unlink(name, dir_fd=dirfd)


def create_at(name: str, dirfd: int, node: Node) -> None:
    """Make ``node`` at ``name`` in ``dirfd`` (which must be free); a directory with its whole tree."""
    if isinstance(node, Link):
        os.symlink(node.target, name, dir_fd=dirfd)
    elif isinstance(node, File):
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        fd = os.open(name, flags, 0o600, dir_fd=dirfd)
        with os.fdopen(fd, "wb") as f:
            f.write(node.data)
            os.fchmod(f.fileno(), node.mode)
    elif isinstance(node, Dir):
        os.mkdir(name, 0o700, dir_fd=dirfd)
        fd = os.open(name, DIR_FLAGS, dir_fd=dirfd)
        try:
            for child, sub in node.children:
                create_at(child, fd, sub)
            os.fchmod(fd, node.mode)
        finally:
            os.close(fd)


def _replace(name: str, dirfd: int, node: Node) -> None:
    """Put ``node`` at ``name``: a file by a rename over it (a reader never finds it missing)."""
    st = lstat_at(name, dirfd)
    if isinstance(node, File) and (st is None or not stat.S_ISDIR(st.st_mode)):
        aside = f".{name}.jidocode-{os.urandom(6).hex()}"
        create_at(aside, dirfd, node)
        os.rename(aside, name, src_dir_fd=dirfd, dst_dir_fd=dirfd)
        return
    remove_at(name, dirfd)
    create_at(name, dirfd, node)


def _empty_tree(node: Node) -> bool:
    """A directory holding only directories holding nothing else: it runs nothing and names no file."""
    return isinstance(node, Dir) and all(_empty_tree(child) for _, child in node.children)


def _without_new_empty_dirs(now: Node, before: Node) -> Node:
    """``now`` less the empty directory trees that ``before`` did not have (at any depth).

    The runtime makes empty folders in protected paths itself while calls run (the asset loader's
    ``.jido/{skills,…,state}`` on a project's first load): they are no change worth stopping a
    call for, and a file put in one later is.
    """
    if not isinstance(now, Dir) or not isinstance(before, Dir):
        return now
    had = dict(before.children)
    kept = tuple(
        (name, _without_new_empty_dirs(child, had[name]) if name in had else child)
        for name, child in now.children
        if name in had or not _empty_tree(child)
    )
    return Dir(now.mode, kept)


def _same(name: str, dirfd: int, node: Node) -> bool:
    if isinstance(node, Present):
        st = lstat_at(name, dirfd)
        return st is not None and _kind(st.st_mode) == node.kind
    try:
        return _without_new_empty_dirs(_node(name, dirfd, _Budget(), name), node) == node
    except (TooLarge, OSError):
        return False


def _only_empty_dirs(name: str, dirfd: int) -> bool:
    """Whether ``name`` is an empty directory tree (see :func:`_empty_tree`)."""
    try:
        return _empty_tree(_node(name, dirfd, _Budget(), name))
    except (TooLarge, OSError):
        return False


def _walk_for_repair(
    root_fd: int,
    parts: tuple[str, ...],
    needed: bool,
    fixed: list[str],
    rel: str,
    before: dict[str, Node] | None = None,
) -> int | None:
    """Open the parent of ``parts[-1]``, removing links and files in the way (and creating dirs if
    ``needed``); a file ``before`` recorded in the way, unchanged, is kept (a worktree's ``.git``)."""
    fd = os.dup(root_fd)
    handed_over = False
    try:
        for i, name in enumerate(parts[:-1]):
            st = lstat_at(name, fd)
            was = (before or {}).get("/".join(parts[: i + 1]))
            if st is not None and isinstance(was, File) and not needed and _same(name, fd, was):
                return None  # the protected path cannot exist below a file, as before the call
            if st is not None and not stat.S_ISDIR(st.st_mode):
                remove_at(name, fd)  # a link or file took the place of a directory: it makes rel reachable
                fixed.append("/".join(parts[: i + 1]))
                st = None
            if st is None:
                if not needed:
                    return None
                os.mkdir(name, 0o755, dir_fd=fd)
            old, fd = fd, os.open(name, DIR_FLAGS, dir_fd=fd)
            os.close(old)
        handed_over = True
        return fd
    finally:
        if not handed_over:  # closed once, also when the removal or mkdir failed
            os.close(fd)


def repair(root: str, before: dict[str, Node]) -> list[str]:
    """Put every protected path back as ``before`` had it; the paths that had to be repaired."""
    fixed: list[str] = []
    root_fd = os.open(root, DIR_FLAGS)
    try:
        for rel, node in before.items():
            parts = PurePosixPath(rel).parts
            needed = not isinstance(node, (Missing, Present))
            parent = _walk_for_repair(root_fd, parts, needed, fixed, rel, before)
            if parent is None:
                continue
            try:
                name = parts[-1]
                if isinstance(node, Missing):
                    if lstat_at(name, parent) is not None and not _only_empty_dirs(name, parent):
                        remove_at(name, parent)
                        fixed.append(rel)
                elif isinstance(node, Present):
                    if not _same(name, parent, node):
                        # too large to have been captured: a kind change is all that can be undone
                        st = lstat_at(name, parent)
                        if st is not None and (node.kind == "dir") != stat.S_ISDIR(st.st_mode):
                            remove_at(name, parent)
                        fixed.append(rel)
                elif not _same(name, parent, node):
                    _replace(name, parent, node)
                    fixed.append(rel)
            finally:
                os.close(parent)
    finally:
        os.close(root_fd)
    return sorted(set(fixed))
