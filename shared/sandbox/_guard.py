"""Protected paths kept by a snapshot, a watch while calls run, and a repair.

Bubblewrap binds the protected paths that exist read-only, but cannot bind a
path that does not exist yet without creating it in the user's tree; Landlock
cannot take any subtree out of the writable project root (rights add up down
the tree: what lets a command create a top-level file lets it write
``.git/config``). Both gaps are closed here: before the call the protected
paths are captured (missing, a symlink, a file with its bytes, a directory with
its tree); while it runs they are watched (:mod:`._watch`), and whatever
differs is removed and the captured state put back *at once*, the calls in
flight stopped and failed (:class:`Ticket`); after it the same repair runs
again. The repair walks from the root with ``O_NOFOLLOW`` directory
descriptors, and removes a symlink or file that took the place of a directory
on the way, so it never writes through a link.

The git directory itself is held by an ``O_PATH`` descriptor
(:func:`put_git_back`): a ``.git`` moved anywhere is moved back, one removed is
replaced by an empty repository with the original ``HEAD`` and config (its
objects are lost), and a removed ``HEAD``, ``objects`` or ``refs`` is put back,
so git never takes the project for no repository and looks above the root.

Calls of one project that overlap share one snapshot (:class:`Guard`): the
first takes it, each repairs when it ends, the last drops it. A call that
starts while another has changed a protected path therefore still restores
the state from before the first one; a change is charged to every call in
flight (which one made it cannot be told).

Limits (see docs/decisions/0307-landlock-keeps-git.md): between a change and
its repair a protected path is on disk for the watch's latency (milliseconds);
the contents of ``.git`` other than the protected paths (objects, refs, the
index) are not kept: a command can delete them, as git itself can; a change the
user makes to a protected path during a call is undone too (and stops the
call); two tool-runner processes sharing a project directory do not share
snapshots.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import stat
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Final

from ._watch import Targets, Watch, targets

__all__ = [
    "GUARD",
    "Dir",
    "File",
    "Guard",
    "Link",
    "Missing",
    "Node",
    "Present",
    "Ticket",
    "TooLarge",
    "capture",
    "put_git_back",
    "repair",
]

#: What a snapshot of one project may hold before a Landlock call is refused.
MAX_BYTES: Final = 16 * 1024 * 1024
MAX_ENTRIES: Final = 4096
_DIR_FLAGS: Final = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


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


def _lstat(name: str, dirfd: int) -> os.stat_result | None:
    try:
        return os.stat(name, dir_fd=dirfd, follow_symlinks=False)
    except FileNotFoundError:
        return None
    except NotADirectoryError:
        return None


def _node(name: str, dirfd: int, budget: _Budget, what: str) -> Node:
    st = _lstat(name, dirfd)
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
        fd = os.open(name, _DIR_FLAGS, dir_fd=dirfd)
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
    root_fd = os.open(root, _DIR_FLAGS)
    try:
        for rel in _expand(root, rels):
            parts = PurePosixPath(rel).parts
            fd = os.dup(root_fd)
            try:
                blocked: str | None = None
                for name in parts[:-1]:
                    st = _lstat(name, fd)
                    if st is None or not stat.S_ISDIR(st.st_mode):
                        blocked = "link" if st is not None and stat.S_ISLNK(st.st_mode) else "missing"
                        break
                    nxt = os.open(name, _DIR_FLAGS, dir_fd=fd)
                    os.close(fd)
                    fd = nxt
                if blocked == "link":
                    continue
                if blocked == "missing":
                    out[rel] = Missing()
                    _keep_file_in_the_way(out, parts, root_fd)
                    continue
                st = _lstat(parts[-1], fd)
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
            st = _lstat(name, fd)
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
            nxt = os.open(name, _DIR_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = nxt
    finally:
        os.close(fd)


def _remove(name: str, dirfd: int) -> None:
    st = _lstat(name, dirfd)
    if st is None:
        return
    if stat.S_ISDIR(st.st_mode):
        shutil.rmtree(name, dir_fd=dirfd)
    else:
        os.unlink(name, dir_fd=dirfd)


def _create(name: str, dirfd: int, node: Node) -> None:
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
        fd = os.open(name, _DIR_FLAGS, dir_fd=dirfd)
        try:
            for child, sub in node.children:
                _create(child, fd, sub)
            os.fchmod(fd, node.mode)
        finally:
            os.close(fd)


def _replace(name: str, dirfd: int, node: Node) -> None:
    """Put ``node`` at ``name``: a file by a rename over it (a reader never finds it missing)."""
    st = _lstat(name, dirfd)
    if isinstance(node, File) and (st is None or not stat.S_ISDIR(st.st_mode)):
        aside = f".{name}.jidocode-{os.urandom(6).hex()}"
        _create(aside, dirfd, node)
        os.rename(aside, name, src_dir_fd=dirfd, dst_dir_fd=dirfd)
        return
    _remove(name, dirfd)
    _create(name, dirfd, node)


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
        st = _lstat(name, dirfd)
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
            st = _lstat(name, fd)
            was = (before or {}).get("/".join(parts[: i + 1]))
            if st is not None and isinstance(was, File) and not needed and _same(name, fd, was):
                return None  # the protected path cannot exist below a file, as before the call
            if st is not None and not stat.S_ISDIR(st.st_mode):
                _remove(name, fd)  # a link or file took the place of a directory: it makes rel reachable
                fixed.append("/".join(parts[: i + 1]))
                st = None
            if st is None:
                if not needed:
                    return None
                os.mkdir(name, 0o755, dir_fd=fd)
            old, fd = fd, os.open(name, _DIR_FLAGS, dir_fd=fd)
            os.close(old)
        handed_over = True
        return fd
    finally:
        if not handed_over:  # closed once, also when the removal or mkdir failed
            os.close(fd)


def repair(root: str, before: dict[str, Node]) -> list[str]:
    """Put every protected path back as ``before`` had it; the paths that had to be repaired."""
    fixed: list[str] = []
    root_fd = os.open(root, _DIR_FLAGS)
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
                    if _lstat(name, parent) is not None and not _only_empty_dirs(name, parent):
                        _remove(name, parent)
                        fixed.append(rel)
                elif isinstance(node, Present):
                    if not _same(name, parent, node):
                        # too large to have been captured: a kind change is all that can be undone
                        st = _lstat(name, parent)
                        if st is not None and (node.kind == "dir") != stat.S_ISDIR(st.st_mode):
                            _remove(name, parent)
                        fixed.append(rel)
                elif not _same(name, parent, node):
                    _replace(name, parent, node)
                    fixed.append(rel)
            finally:
                os.close(parent)
    finally:
        os.close(root_fd)
    return sorted(set(fixed))


@dataclass
class _GitDir:
    """The project's git directory as it was when the snapshot was taken.

    ``fd`` is an ``O_PATH`` descriptor of the directory itself: it follows the directory across
    a rename (``mv .git .git_moved``), so the original is found and brought back wherever the
    command put it inside the filesystem; ``head`` is its ``HEAD`` (put back if removed).
    """

    fd: int
    ident: tuple[int, int]
    head: bytes | None


def _hold_git(root_fd: int) -> _GitDir | None:
    """The root's ``.git`` directory (``None`` when it is missing, a file or a link)."""
    try:
        fd = os.open(".git", os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=root_fd)
    except OSError:
        return None
    st = os.fstat(fd)
    return _GitDir(fd, (st.st_dev, st.st_ino), _small_file("HEAD", fd))


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
    fd = os.open("/", _DIR_FLAGS)
    for name in parts[1:-1]:
        try:
            nxt = os.open(name, _DIR_FLAGS, dir_fd=fd)
        except OSError:
            os.close(fd)
            return None
        os.close(fd)
        fd = nxt
    return fd, parts[-1]


def _find_moved(git: _GitDir) -> tuple[int, str] | None:
    """Where the original git directory is now (parent descriptor, name), or ``None`` if it was removed."""
    where = os.readlink(f"/proc/self/fd/{git.fd}")
    if where.endswith(" (deleted)"):
        return None
    found = _open_parent(where)
    if found is None:
        return None
    parent, name = found
    st = _lstat(name, parent)
    if st is None or (st.st_dev, st.st_ino) != git.ident:
        os.close(parent)
        return None
    return found


def _make_empty_repository(root_fd: int, head: bytes | None) -> None:
    """``.git`` as ``git init`` makes it (its config and hooks are then put back by :func:`repair`)."""
    os.mkdir(".git", 0o755, dir_fd=root_fd)
    fd = os.open(".git", _DIR_FLAGS, dir_fd=root_fd)
    try:
        for d in ("objects", "refs", "refs/heads", "refs/tags"):
            os.mkdir(d, 0o755, dir_fd=fd)
        _create("HEAD", fd, File(head or b"ref: refs/heads/main\n", 0o644))
    finally:
        os.close(fd)


#: What makes the git directory a repository (watched too: a removal is put back at once).
_GIT_SKELETON: Final = (".git/HEAD", ".git/objects", ".git/refs")


def _put_skeleton_back(git: _GitDir) -> list[str]:
    """Put back what makes the git directory a repository (``HEAD``, ``objects``, ``refs``) if removed.

    Without them git takes the project for no repository and looks for one above the root.
    """
    fixed = []
    for name in ("objects", "refs"):
        if _lstat(name, git.fd) is None:
            os.mkdir(name, 0o755, dir_fd=git.fd)
            fixed.append(f".git/{name}")
    if git.head is not None and _lstat("HEAD", git.fd) is None:
        _create("HEAD", git.fd, File(git.head, 0o644))
        fixed.append(".git/HEAD")
    return fixed


def put_git_back(root: str, git: _GitDir) -> list[str]:
    """Undo a move, replacement or removal of the root's git directory; what had to be undone.

    Moved (anywhere the command could write, even inside a new ``.git``): the original is
    renamed to a free name in the root, whatever stands at ``.git`` is removed, and the original
    renamed back. Removed: its objects are lost, and an empty repository with the original
    ``HEAD`` takes its place, so git never goes looking for a repository above the root. A
    ``HEAD``, ``objects`` or ``refs`` removed from it is put back. ``git`` then holds the
    directory at ``.git``.
    """
    root_fd = os.open(root, _DIR_FLAGS)
    try:
        st = _lstat(".git", root_fd)
        if st is not None and (st.st_dev, st.st_ino) == git.ident:
            return _put_skeleton_back(git)
        moved = _find_moved(git)
        if moved is None:
            _remove(".git", root_fd)
            _make_empty_repository(root_fd, git.head)
        else:
            parent, name = moved
            aside = f".git-restoring-{os.urandom(6).hex()}"
            try:
                os.rename(name, aside, src_dir_fd=parent, dst_dir_fd=root_fd)
            finally:
                os.close(parent)
            _remove(".git", root_fd)
            os.rename(aside, ".git", src_dir_fd=root_fd, dst_dir_fd=root_fd)
        held = _hold_git(root_fd)
        if held is not None:
            os.close(git.fd)
            git.fd, git.ident = held.fd, held.ident
        return [".git", *_put_skeleton_back(git)]
    finally:
        os.close(root_fd)


class Ticket:
    """One call's part in its root's snapshot: what was repaired while it ran, and how to stop it.

    The guard may stop the call from its watch thread (:meth:`halt`) as soon as a protected
    path changes; :meth:`attach` gives it the way to (the call's process, once started).
    """

    def __init__(self, root: str) -> None:
        self.root = root
        self.repaired: set[str] = set()
        self._stop: Callable[[], None] | None = None
        self._halted = False
        self._lock = threading.Lock()

    def attach(self, stop: Callable[[], None]) -> None:
        """Stop the call with ``stop`` when a protected path changes (at once if one already has)."""
        with self._lock:
            self._stop = stop
            if self._halted:
                stop()

    def detach(self) -> None:
        """The call's processes are gone: nothing to stop any more (no ``stop`` runs after this)."""
        with self._lock:
            self._stop = None

    def halt(self) -> None:
        """Stop the call (now if attached, else when it is)."""
        # under the lock: ``stop`` never runs after :meth:`detach` (its pidfd is closed then)
        with self._lock:
            self._halted = True
            if self._stop is not None:
                self._stop()


@dataclass
class _Held:
    root: str
    before: dict[str, Node]
    full: bool
    git: _GitDir | None = None
    calls: list[Ticket] = field(default_factory=list)
    watch: Watch | None = None

    def find(self) -> Targets:
        """What the watch looks at: the protected paths, and the inside of the protected directories."""
        trees = [rel for rel, node in self.before.items() if isinstance(node, Dir)]
        rels = [*self.before, *(_GIT_SKELETON if self.git is not None else ())]
        return targets(self.root, rels, trees)

    def drop(self) -> Watch | None:
        """Release the git directory's descriptor; the watch, for the caller to close outside the lock."""
        if self.git is not None:
            os.close(self.git.fd)
            self.git = None
        watch, self.watch = self.watch, None
        return watch


class Guard:
    """The snapshots of the projects with sandboxed calls in flight, one per root while calls overlap.

    While a root has calls in flight its protected paths are watched (:mod:`._watch`): a change
    is repaired at once, recorded on every call in flight, and stops them (:class:`Ticket`).
    The work runs in worker threads under a thread lock: capturing and repairing are file I/O,
    and the event loop never waits on them.
    """

    def __init__(self) -> None:
        self._held: dict[str, _Held] = {}
        self._lock = threading.Lock()

    def _take(self, root: str, rels: tuple[str, ...], full: bool, watch: bool = True) -> _Held:
        root_fd = os.open(root, _DIR_FLAGS)
        try:
            git = _hold_git(root_fd)
        finally:
            os.close(root_fd)
        held = _Held(root, {}, full, git)
        try:
            held.before = capture(root, rels, full=full)
            try:
                if watch:
                    held.watch = Watch(root, held.find, lambda: self._changed(held))
            except OSError:
                if full:
                    raise  # under Landlock the watch is the wall while the call runs
        except BaseException:
            held.drop()
            raise
        return held

    def _enter(self, root: str, rels: tuple[str, ...], full: bool, watch: bool = True) -> Ticket:
        with self._lock:
            held = self._held.get(root)
            if held is None:
                held = self._held[root] = self._take(root, rels, full, watch)
            elif full and not held.full:
                # bubblewrap calls hold the snapshot (kinds only; they cannot change what exists):
                # Landlock needs the contents, which are still the ones from before them
                kinds = tuple(r for r, n in held.before.items() if isinstance(n, Present))
                held.before.update(capture(root, kinds, full=True))
                held.full = True
            missing = tuple(r for r in rels if r not in held.before)
            if missing:
                held.before.update(capture(root, missing, full=full))
            if held.watch is not None:
                held.watch.arm()
            ticket = Ticket(root)
            held.calls.append(ticket)
            return ticket

    @staticmethod
    def _check(held: _Held) -> list[str]:
        fixed = put_git_back(held.root, held.git) if held.git is not None else []
        return sorted({*fixed, *repair(held.root, held.before)})

    def _changed(self, held: _Held) -> None:
        """A watched path changed (in the watch thread): repair, and stop every call in flight if it had to.

        A repair that fails stops them too (the one after each call then tries again).
        """
        with self._lock:
            if self._held.get(held.root) is not held or held.watch is None:
                return
            try:
                held.watch.arm()
                fixed = self._check(held)
            except OSError:
                fixed = []
                calls = list(held.calls)
            else:
                calls = list(held.calls) if fixed else []
            for call in calls:
                call.repaired.update(fixed)
        for call in calls:
            call.halt()

    def _leave(self, root: str, ticket: Ticket | None) -> list[str]:
        watch: Watch | None = None
        others: list[Ticket] = []
        try:
            with self._lock:
                held = self._held.get(root)
                if held is None:
                    return []
                if ticket is None or ticket not in held.calls:
                    ticket = held.calls[0] if held.calls else Ticket(root)
                try:
                    fixed = self._check(held)
                    if fixed:
                        others = [c for c in held.calls if c is not ticket]
                        for call in (ticket, *others):
                            call.repaired.update(fixed)
                finally:
                    if ticket in held.calls:
                        held.calls.remove(ticket)
                    if not held.calls:
                        del self._held[root]
                        watch = held.drop()
        finally:
            # outside the lock: the watch thread may be waiting for it, and is joined here
            if watch is not None:
                watch.close()
        for call in others:
            call.halt()  # a change found after this call was made by a call still running
        return sorted(ticket.repaired)

    async def enter(self, root: str, rels: tuple[str, ...], *, full: bool, watch: bool = True) -> Ticket:
        """Join (or take) the root's snapshot. ``full``: contents are needed (raises :class:`TooLarge`).
        ``watch``: repair while the calls run (the first call of the root decides), else only after."""
        return await asyncio.to_thread(self._enter, root, rels, full, watch)

    async def leave(self, root: str, ticket: Ticket | None = None) -> list[str]:
        """Repair the root's protected paths; the ones repaired during and after ``ticket``'s call.

        The last call out drops the snapshot. Without ``ticket``, the longest-running call leaves.
        """
        return await asyncio.to_thread(self._leave, root, ticket)


#: The guard of this process (the filesystem is shared by every call of the process).
GUARD: Final = Guard()
