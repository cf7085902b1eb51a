"""Reaching and writing files below a root without following a link on the way.

A path checked with ``realpath`` can change before it is opened: another
process may swap a directory on the way for a symlink to ``/etc``. So the walk
opens each component **relative to the descriptor of the one before**, with
``O_NOFOLLOW``: a component that is (or became) a link makes the open fail
(``ELOOP``/``ENOTDIR``) instead of following it. The tool runner's file tools
(``services/tool_runner/fsops.py``) and the PRD files (``services/prd/files.py``,
``services/prd/eventlog.py``) both walk this way.

Every file the runtime itself writes under a project (docs/decisions/0301) goes
through this module, on the descriptor of its directory:

- :func:`open_dir` walks (and on request makes) the directories;
- :func:`replace_bytes` writes a temporary file beside the target, fsyncs it,
  renames it over the target and fsyncs the directory: a rename replaces the
  directory entry, so it never writes through a link or into a hard-linked file;
- :func:`create_bytes` writes a file only when the name is free (``O_EXCL``);
- :class:`AppendFile` / :func:`append_bytes` append to a file that is regular,
  reached without a link and has no other name (a hard link could be a file
  outside the project), checking before every write that the name still is
  that file; it cuts a file only when the runtime created it, or recognised it
  as its own by its first bytes;
- :func:`open_read` opens a file for reading under the same conditions.

Content below the root is input from whoever wrote the project (a repository, a
model): a link, a FIFO, a hard link or a foreign file where the runtime expects
its own is refused with :class:`UnsafePath` naming it, never followed, never
truncated. Errors::

    InvalidInput
    └── UnsafePath     reason: link · not_regular · hard_linked · foreign · replaced
    NotFound           a directory or file that is not there (and is not to be made)
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from types import TracebackType
from typing import Final, Literal, Self

from jidocode.shared.errors import InvalidInput, NotFound

__all__ = [
    "DIR_FLAGS",
    "HEAD_BYTES",
    "AppendFile",
    "UnsafePath",
    "append_bytes",
    "create_bytes",
    "dir_fd",
    "open_dir",
    "open_read",
    "replace_bytes",
]

#: How each directory on the way is opened: never through a link.
DIR_FLAGS: Final = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
#: How a file is opened: never through a link, never blocking on a FIFO.
_FILE_FLAGS: Final = os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
#: How many first bytes of an existing file :class:`AppendFile` shows its ``recognise`` check.
HEAD_BYTES: Final = 64 * 1024

Reason = Literal["link", "not_regular", "hard_linked", "foreign", "replaced"]


class UnsafePath(InvalidInput):
    """A path the runtime does not read or write through; ``details``: ``file``, ``reason``."""

    def __init__(self, path: str | Path, reason: Reason, message: str) -> None:
        super().__init__(message, details={"file": str(path), "reason": reason})
        self.path = str(path)
        self.reason: Reason = reason


def _linked_dir(path: str | Path) -> UnsafePath:
    return UnsafePath(
        path,
        "link",
        f"{path} is a symbolic link or not a directory; the runtime does not read or write through "
        "links below a project (a link could lead outside it)",
    )


def _linked_file(path: str | Path) -> UnsafePath:
    return UnsafePath(
        path,
        "link",
        f"{path} is a symbolic link; the runtime does not read or write through links below a "
        "project (a link could lead outside it)",
    )


def _not_regular(path: str | Path) -> UnsafePath:
    return UnsafePath(path, "not_regular", f"{path} is not a regular file")


def _hard_linked(path: str | Path, names: int) -> UnsafePath:
    return UnsafePath(
        path,
        "hard_linked",
        f"{path} has {names} names (hard links); the runtime does not read or write a file that may "
        "be another file, outside the project, under a second name",
    )


def _foreign(path: str | Path) -> UnsafePath:
    return UnsafePath(
        path,
        "foreign",
        f"{path} was not written by the runtime (its first bytes are not what the runtime writes "
        "there); it is left as it is: move it away and the runtime starts a new one",
    )


def _replaced(path: str | Path) -> UnsafePath:
    return UnsafePath(
        path,
        "replaced",
        f"{path} was replaced or removed while the runtime was writing it; the runtime stopped "
        "writing rather than follow the new entry",
    )


def _not_found(path: str | Path) -> NotFound:
    return NotFound(f"{path} does not exist", details={"file": str(path)})


# --- directories --------------------------------------------------------------------------------


@contextlib.contextmanager
def dir_fd(
    root: str | Path,
    parts: Iterable[str],
    *,
    missing: Callable[[str], Exception],
    linked: Callable[[str], Exception],
    create: bool = False,
) -> Iterator[int]:
    """A descriptor of ``root/parts…``, no link below ``root`` followed (``root`` itself may be one).

    ``missing(path)`` is raised for a directory that does not exist (``root`` included) unless
    ``create`` makes it (mode 0755); ``linked(path)`` for one that is a link or not a directory.
    ``path`` is the part of the walk reached so far.
    """
    here = str(root)
    try:
        fd = os.open(here, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except (FileNotFoundError, NotADirectoryError):
        raise missing(here) from None
    try:
        for part in parts:
            here = os.path.join(here, part)
            try:
                nxt = os.open(part, DIR_FLAGS, dir_fd=fd)
            except FileNotFoundError:
                if not create:
                    raise missing(here) from None
                with contextlib.suppress(FileExistsError):
                    os.mkdir(part, 0o755, dir_fd=fd)
                try:
                    nxt = os.open(part, DIR_FLAGS, dir_fd=fd)
                except OSError as exc:  # made, then swapped for a link before it was opened
                    raise linked(here) from exc
            except OSError as exc:
                if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                    raise linked(here) from exc
                raise
            os.close(fd)
            fd = nxt
        yield fd
    finally:
        os.close(fd)


def open_dir(
    root: str | Path, parts: Iterable[str], *, create: bool = False
) -> contextlib.AbstractContextManager[int]:
    """:func:`dir_fd` with this module's errors: ``NotFound`` for a missing directory (unless
    ``create``), :class:`UnsafePath` naming the first component that is a link or not a directory."""
    return dir_fd(root, parts, create=create, missing=_not_found, linked=_linked_dir)


# --- one file in a directory ---------------------------------------------------------------------


def _open_leaf(dfd: int, name: str, flags: int, shown: str | Path, mode: int = 0o644) -> int:
    """``name`` in ``dfd`` opened with ``flags`` (never through a link, never blocking), checked to
    be a regular file with one name, then made blocking."""
    try:
        fd = os.open(name, flags | _FILE_FLAGS, mode, dir_fd=dfd)
    except FileNotFoundError:
        raise _not_found(shown) from None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise _linked_file(shown) from exc
        if exc.errno in (errno.EISDIR, errno.ENXIO, errno.ENODEV, errno.ENOTDIR):
            raise _not_regular(shown) from exc  # a directory; a FIFO nobody reads; a socket
        raise
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise _not_regular(shown)
        if info.st_nlink > 1:
            raise _hard_linked(shown, info.st_nlink)
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def open_read(dfd: int, name: str, *, shown: str | Path) -> int:
    """A read-only descriptor of ``name`` in ``dfd``: a regular file with one name, no link followed.

    ``NotFound`` when missing; :class:`UnsafePath` for a link, a non-regular file or a hard link.
    The caller closes it.
    """
    return _open_leaf(dfd, name, os.O_RDONLY, shown)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _refuse_link(dfd: int, name: str, shown: str | Path) -> bool:
    """Whether ``name`` exists in ``dfd``; :class:`UnsafePath` when it is a link or not a regular
    file (a rename would not follow a link, but a planted one means someone meddled: say so)."""
    try:
        info = os.stat(name, dir_fd=dfd, follow_symlinks=False)
    except FileNotFoundError:
        return False
    if stat.S_ISLNK(info.st_mode):
        raise _linked_file(shown)
    if not stat.S_ISREG(info.st_mode):
        raise _not_regular(shown)
    return True


def _write_temp(dfd: int, name: str, data: bytes, shown: str | Path, mode: int) -> str:
    """A new temporary file beside ``name`` holding ``data``, fsynced; its name."""
    tmp = f".{name}.{os.getpid()}.{os.urandom(4).hex()}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _FILE_FLAGS, mode, dir_fd=dfd)
    try:
        try:
            _write_all(fd, data)
            os.fchmod(fd, mode)
            os.fsync(fd)
        finally:
            os.close(fd)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp, dir_fd=dfd)
        raise
    return tmp


def replace_bytes(dfd: int, name: str, data: bytes, *, shown: str | Path, mode: int = 0o644) -> bool:
    """``name`` in ``dfd`` replaced by ``data`` at once; whether it was created (did not exist).

    A temporary file beside it, fsync, rename over it, fsync of the directory: readers see the old
    or the new file, and on any failure the temporary file is removed and the old file stays. An
    existing ``name`` that is a link or not a regular file is :class:`UnsafePath` (left as it is).
    """
    existed = _refuse_link(dfd, name, shown)
    tmp = _write_temp(dfd, name, data, shown, mode)
    try:
        os.replace(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp, dir_fd=dfd)
        raise
    os.fsync(dfd)
    return not existed


def create_bytes(dfd: int, name: str, data: bytes, *, shown: str | Path, mode: int = 0o644) -> bool:
    """``name`` in ``dfd`` made with ``data`` when nothing has that name (not even a link); whether
    it was made. Never touches an existing entry."""
    try:
        fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _FILE_FLAGS, mode, dir_fd=dfd)
    except FileExistsError:
        return False
    try:
        _write_all(fd, data)
        os.fchmod(fd, mode)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.fsync(dfd)
    return True


class AppendFile:
    """One file in a directory, open for appending: regular, reached without a link, its only name.

    Make it with :meth:`open`. Every :meth:`write` first checks that the name still is this file
    (a file swapped for a link between two writes stops the writer with :class:`UnsafePath`
    ``replaced``). :meth:`cut` shortens the file only when it is the runtime's own: created by this
    :meth:`open`, empty, or recognised by its first bytes.
    """

    def __init__(self, dfd: int, fd: int, name: str, shown: str | Path, *, ours: bool) -> None:
        self._dfd = dfd
        self._fd = fd
        self.name = name
        self.shown = str(shown)
        #: Whether the runtime may cut this file (it made it, or recognised it as its own).
        self.ours = ours

    @classmethod
    def open(
        cls,
        dfd: int,
        name: str,
        *,
        shown: str | Path,
        create: bool = True,
        recognise: Callable[[bytes], bool] | None = None,
    ) -> AppendFile:
        """``name`` in directory ``dfd`` (the descriptor is duplicated), made (0644) when missing
        and ``create``, else ``NotFound``.

        ``recognise(head)`` is shown the first :data:`HEAD_BYTES` of an existing non-empty file:
        when given and it answers ``False`` the file is :class:`UnsafePath` ``foreign`` (nothing is
        appended to a file the runtime did not write). Without it an existing file is appended to
        but never cut.
        """
        created = False
        for _ in range(3):  # made and removed again by someone else in between: look again
            if create:
                try:
                    fd = _open_leaf(dfd, name, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_EXCL, shown)
                except FileExistsError:
                    pass
                else:
                    created = True
                    break
            try:
                fd = _open_leaf(dfd, name, os.O_RDWR | os.O_APPEND, shown)
                break
            except NotFound:
                if not create:
                    raise
        else:
            raise _replaced(shown)
        try:
            ours = created
            size = os.fstat(fd).st_size
            if not created and size == 0:
                ours = True
            elif not created and recognise is not None:
                if not recognise(os.pread(fd, HEAD_BYTES, 0)):
                    raise _foreign(shown)
                ours = True
            own_dfd = os.dup(dfd)
        except BaseException:
            os.close(fd)
            raise
        return cls(own_dfd, fd, name, shown, ours=ours)

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> None:
        """Close the file and the directory (again: nothing)."""
        for fd in (self._fd, self._dfd):
            if fd >= 0:
                os.close(fd)
        self._fd = self._dfd = -1

    @property
    def size(self) -> int:
        return os.fstat(self._fd).st_size

    def read_at(self, offset: int, count: int) -> bytes:
        """Up to ``count`` bytes from ``offset``."""
        return os.pread(self._fd, count, offset)

    def still_named(self) -> bool:
        """Whether ``name`` in the directory is still this file (not removed, renamed, replaced)."""
        try:
            named = os.stat(self.name, dir_fd=self._dfd, follow_symlinks=False)
        except FileNotFoundError:
            return False
        mine = os.fstat(self._fd)
        return (named.st_dev, named.st_ino) == (mine.st_dev, mine.st_ino)

    def _check(self) -> None:
        if not self.still_named():
            raise _replaced(self.shown)

    def write(self, data: bytes) -> None:
        """Append ``data`` (one ``write`` when it fits: ``O_APPEND`` keeps a line whole)."""
        self._check()
        _write_all(self._fd, data)

    def cut(self, size: int) -> None:
        """Shorten the file to ``size`` bytes: only the runtime's own file (else ``foreign``)."""
        if not self.ours:
            raise _foreign(self.shown)
        self._check()
        os.ftruncate(self._fd, size)

    def move_to(self, target: str) -> None:
        """Rename the file to ``target`` in the same directory (replacing what has that name; a
        rename follows no link), e.g. to rotate a log. The descriptor stays on the moved file."""
        self._check()
        try:
            info = os.stat(target, dir_fd=self._dfd, follow_symlinks=False)
        except FileNotFoundError:
            pass
        else:
            if stat.S_ISDIR(info.st_mode):
                raise _not_regular(os.path.join(os.path.dirname(self.shown), target))
        os.replace(self.name, target, src_dir_fd=self._dfd, dst_dir_fd=self._dfd)


def append_bytes(
    dfd: int, name: str, data: bytes, *, shown: str | Path, rotate_at: int | None = None
) -> None:
    """Append ``data`` to ``name`` in ``dfd`` (made when missing) through :class:`AppendFile`.

    With ``rotate_at``, a non-empty file that the append would take past ``rotate_at`` bytes is
    first renamed ``<name>.1`` (replacing the previous one) and ``data`` starts a new file.
    """
    with AppendFile.open(dfd, name, shown=shown) as current:
        size = current.size
        if rotate_at is None or size == 0 or size + len(data) <= rotate_at:
            current.write(data)
            return
        current.move_to(f"{name}.1")
    with AppendFile.open(dfd, name, shown=shown) as fresh:
        fresh.write(data)
