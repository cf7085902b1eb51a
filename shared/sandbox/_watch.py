"""Protected paths watched while calls run: inotify through ctypes, one thread per project root.

The guard (:mod:`._guard`) puts the protected paths back after a call, but a change made
*during* a call was on disk until the call ended: a ``core.fsmonitor`` appended to
``.git/config`` by a 10 s call ran in the user's own ``git status`` 4 s into it. A
:class:`Watch` reports, within milliseconds, every change to a protected path and to each
directory on the way to one (a ``.git`` renamed or removed), and the guard then repairs at
once and stops the calls in flight.

What is watched comes from :func:`targets`: a directory (relative to the root) and the names
in it that matter (``None``: every name, the inside of a protected directory). Directories are
opened from the root with ``O_NOFOLLOW`` at every step and watched through their descriptor,
so a symlink the command plants on the way is never followed. After each reported change the
caller re-arms the watches (:meth:`Watch.arm`) *before* it looks at the paths again: a change
made after the look raises another report, so none is lost between the two.
"""

from __future__ import annotations

import ctypes
import logging
import os
import select
import stat
import struct
import threading
from collections.abc import Callable, Iterable
from pathlib import PurePosixPath
from typing import Final

__all__ = ["Targets", "Watch", "targets"]

log = logging.getLogger("jidocode.sandbox")

#: A directory relative to the root ("" is the root) and the names in it to watch (``None``: all).
Targets = dict[str, frozenset[str] | None]

_IN_MODIFY: Final = 0x2
_IN_ATTRIB: Final = 0x4
_IN_CLOSE_WRITE: Final = 0x8
_IN_MOVED_FROM: Final = 0x40
_IN_MOVED_TO: Final = 0x80
_IN_CREATE: Final = 0x100
_IN_DELETE: Final = 0x200
_IN_DELETE_SELF: Final = 0x400
_IN_MOVE_SELF: Final = 0x800
_IN_Q_OVERFLOW: Final = 0x4000
_IN_IGNORED: Final = 0x8000
_IN_ONLYDIR: Final = 0x01000000
_MASK: Final = (
    _IN_MODIFY
    | _IN_ATTRIB
    | _IN_CLOSE_WRITE
    | _IN_MOVED_FROM
    | _IN_MOVED_TO
    | _IN_CREATE
    | _IN_DELETE
    | _IN_DELETE_SELF
    | _IN_MOVE_SELF
    | _IN_ONLYDIR
)
_EVENT: Final = struct.Struct("iIII")
#: How many directories of one protected tree are watched (a snapshot holds at most 4096 entries).
MAX_DIRS: Final = 4096

_libc: ctypes.CDLL | None = None


def _inotify() -> ctypes.CDLL:
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
    return _libc


def targets(root: str, rels: Iterable[str], trees: Iterable[str]) -> Targets:
    """The directories to watch for the protected ``rels``; each of ``trees`` is watched inside, too.

    For ``.git/hooks``: the root (name ``.git``), ``.git`` (name ``hooks``) and, when it is one of
    ``trees``, every real directory under ``.git/hooks``.
    """
    out: dict[str, set[str] | None] = {}
    for rel in rels:
        parts = PurePosixPath(rel).parts
        for i, name in enumerate(parts):
            d = "/".join(parts[:i])
            if d in out and out[d] is None:
                continue
            out.setdefault(d, set())
            names = out[d]
            if names is not None:
                names.add(name)
    for tree in trees:
        for d in _tree_dirs(root, tree):
            out[d] = None
    return {d: (None if names is None else frozenset(names)) for d, names in out.items()}


def _tree_dirs(root: str, rel: str) -> list[str]:
    """``rel`` and the real directories under it (links are not followed), at most :data:`MAX_DIRS`."""
    fd = _open_under(root, rel)
    if fd is None:
        return []
    found: list[str] = []
    todo = [(rel, fd)]
    try:
        while todo:
            d, dfd = todo.pop()
            try:
                found.append(d)
                try:
                    names = os.listdir(dfd)
                except OSError:
                    continue  # unreadable: watched itself, not inside
                for name in names:
                    if len(found) + len(todo) >= MAX_DIRS:
                        break
                    try:
                        st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
                        if stat.S_ISDIR(st.st_mode):
                            flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
                            todo.append((f"{d}/{name}", os.open(name, flags, dir_fd=dfd)))
                    except OSError:
                        continue
            finally:
                os.close(dfd)
    finally:
        for _, dfd in todo:
            os.close(dfd)
    return found


def _open_under(root: str, rel: str) -> int | None:
    """A descriptor of the real directory ``rel`` under ``root`` (no link followed), or ``None``."""
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        fd = os.open(root, flags)
    except OSError:
        return None
    for name in PurePosixPath(rel).parts:
        try:
            nxt = os.open(name, flags, dir_fd=fd)
        except OSError:
            os.close(fd)
            return None
        os.close(fd)
        fd = nxt
    return fd


class Watch:
    """Reports changes under ``root`` (to ``on_change``, from its own thread) until :meth:`close`.

    ``find`` gives the :data:`Targets` to watch; it is called again at every :meth:`arm`.
    ``on_change`` runs in the watch's thread, one report at a time; it is expected to call
    :meth:`arm` before it looks at the paths.
    """

    def __init__(self, root: str, find: Callable[[], Targets], on_change: Callable[[], None]) -> None:
        self.root = root
        self._find = find
        self._on_change = on_change
        fd = int(_inotify().inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC))
        if fd < 0:
            err = ctypes.get_errno()
            raise OSError(err, f"inotify_init1: {os.strerror(err)}")
        self._fd = fd
        try:
            self._stop_r, self._stop_w = os.pipe2(os.O_CLOEXEC)
        except OSError:
            os.close(fd)
            raise
        #: watch descriptor -> (directory relative to the root, names that matter or None)
        self._watched: dict[int, tuple[str, frozenset[str] | None]] = {}
        self._lock = threading.Lock()
        self._closed = False
        try:
            self.arm()
        except BaseException:
            for f in (fd, self._stop_r, self._stop_w):
                os.close(f)
            raise
        self._thread = threading.Thread(target=self._loop, name=f"jidocode-guard-watch {root}", daemon=True)
        self._thread.start()

    def arm(self) -> None:
        """Watch what :func:`targets` finds now (a directory made or replaced since is added)."""
        with self._lock:
            if self._closed:
                return
            for d, names in self._find().items():
                fd = _open_under(self.root, d)
                if fd is None:
                    continue  # missing: its parent's watch reports when it is made
                try:
                    wd = int(_inotify().inotify_add_watch(self._fd, f"/proc/self/fd/{fd}".encode(), _MASK))
                finally:
                    os.close(fd)
                if wd < 0:
                    err = ctypes.get_errno()  # ENOSPC: fs.inotify.max_user_watches is spent
                    raise OSError(err, f"inotify_add_watch {d or '.'}: {os.strerror(err)}")
                self._watched[wd] = (d, names)

    def close(self) -> None:
        """Stop watching; waits for the thread unless called from it (idempotent)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            os.write(self._stop_w, b"x")
        if threading.current_thread() is not self._thread:
            self._thread.join()
        os.close(self._stop_r)
        os.close(self._stop_w)
        # Closing an inotify instance waits for the kernel's grace period (6-15 ms after a
        # bubblewrap call's mounts went away): off the call's path, closed once, by its own thread.
        threading.Thread(
            target=os.close, args=(self._fd,), name="jidocode-guard-unwatch", daemon=True
        ).start()

    @property
    def closed(self) -> bool:
        return self._closed

    def _loop(self) -> None:
        poll = select.poll()  # not select(): descriptors above 1023 are common in a busy runner
        poll.register(self._fd, select.POLLIN)
        poll.register(self._stop_r, select.POLLIN)
        while True:
            ready = {fd for fd, _ in poll.poll()}
            if self._stop_r in ready:
                return
            try:
                data = os.read(self._fd, 1 << 16)
            except BlockingIOError:
                continue
            if self._matters(data):
                try:
                    self._on_change()
                except Exception:  # the watch goes on (the repair after the call runs regardless)
                    log.exception("the guard could not repair %s while a call ran", self.root)

    def _matters(self, data: bytes) -> bool:
        """Whether one of the events in ``data`` touches a protected path or a directory on the way."""
        hit = False
        with self._lock:
            for wd, mask, name in _events(data):
                if mask & _IN_Q_OVERFLOW:
                    hit = True  # events were lost: look at everything
                    continue
                where = self._watched.get(wd)
                if mask & _IN_IGNORED:
                    hit = hit or self._watched.pop(wd, None) is not None  # gone: re-arm
                    continue
                if where is None:
                    continue
                names = where[1]
                if mask & (_IN_DELETE_SELF | _IN_MOVE_SELF) or names is None or name in names:
                    hit = True
        return hit


def _events(data: bytes) -> list[tuple[int, int, str]]:
    """The ``(wd, mask, name)`` of each ``struct inotify_event`` in ``data``."""
    out = []
    at = 0
    while at + _EVENT.size <= len(data):
        wd, mask, _cookie, size = _EVENT.unpack_from(data, at)
        raw = data[at + _EVENT.size : at + _EVENT.size + size]
        out.append((wd, mask, raw.split(b"\0", 1)[0].decode("utf-8", "surrogateescape")))
        at += _EVENT.size + size
    return out
