"""File access that a symlink swapped in after the policy check cannot redirect.

The directory walk itself is :mod:`jidocode.shared.nofollow` (the PRD files use it too).

The policy resolves a path with ``realpath`` and checks it; between that
check and the open, another process (a ``bash`` call running in parallel, say)
could replace a directory on the way by a symlink to ``/etc``. So files are
opened **relative to a directory file descriptor**, one component at a time,
each with ``O_NOFOLLOW``: a component that became a symlink makes the open
fail (``ELOOP``/``ENOTDIR``) instead of following it. Writes go to a fresh
temporary file in the same directory and are renamed over the target, which
replaces the directory entry — never writing through a symlink or into a file
hard-linked from elsewhere.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from typing import Final

from jidocode.shared.errors import InvalidInput, NotFound, PayloadTooLarge, PermissionDenied
from jidocode.shared.nofollow import UnsafePath, dir_fd, replace_bytes

__all__ = ["MAX_READ_BYTES", "open_dir", "read_bytes", "write_bytes"]

#: read_file never loads more than this from one file.
MAX_READ_BYTES: Final = 16 * 1024 * 1024


def _parts(base: str, path: str) -> list[str]:
    rel = os.path.relpath(path, base)
    if rel == ".":
        return []
    parts = rel.split(os.sep)
    if ".." in parts or os.path.isabs(rel):
        raise PermissionDenied(f"{path} is not below {base}")
    return parts


def _swapped(path: str) -> PermissionDenied:
    return PermissionDenied(
        f"{path}: a path component is (or became) a symlink; refusing to follow it",
        details={"sandbox": "symlink_race"},
    )


def open_dir(base: str, path: str, *, create: bool = False) -> contextlib.AbstractContextManager[int]:
    """A file descriptor of directory ``path`` (below ``base``), no symlink followed."""

    def missing(_reached: str) -> NotFound:
        return NotFound(f"{path}: no such directory")

    return dir_fd(
        base, _parts(base, path), create=create, missing=missing, linked=lambda _reached: _swapped(path)
    )


def read_bytes(base: str, path: str, *, limit: int = MAX_READ_BYTES) -> bytes:
    """The content of regular file ``path``; refuses symlinks, non-files and files over ``limit``."""
    parent, name = os.path.split(path)
    with open_dir(base, parent) as dfd:
        try:
            fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, dir_fd=dfd)
        except FileNotFoundError:
            raise NotFound(f"{path}: no such file") from None
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise _swapped(path) from exc
            if exc.errno == errno.EISDIR:
                raise InvalidInput(f"{path} is a directory") from exc
            raise
        try:
            st = os.fstat(fd)
            if stat.S_ISDIR(st.st_mode):
                raise InvalidInput(f"{path} is a directory (use list_dir)")
            if not stat.S_ISREG(st.st_mode):
                raise InvalidInput(f"{path} is not a regular file")
            if st.st_size > limit:
                raise PayloadTooLarge(
                    f"{path} is {st.st_size} bytes, more than {limit}", details={"size": st.st_size}
                )
            chunks: list[bytes] = []
            total = 0
            while True:
                chunk = os.read(fd, 1 << 20)
                if not chunk:
                    break
                total += len(chunk)
                if total > limit:
                    raise PayloadTooLarge(f"{path} grew beyond {limit} bytes while reading")
                chunks.append(chunk)
            return b"".join(chunks)
        finally:
            os.close(fd)


def write_bytes(base: str, path: str, data: bytes, *, create_parents: bool = True) -> bool:
    """Replace (or create) ``path`` atomically, keeping its permission bits; return whether it was
    created. The write itself is :func:`jidocode.shared.nofollow.replace_bytes` (decision 0301)."""
    parent, name = os.path.split(path)
    with open_dir(base, parent, create=create_parents) as dfd:
        mode = 0o644
        with contextlib.suppress(FileNotFoundError):
            st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
            if stat.S_ISREG(st.st_mode):
                mode = stat.S_IMODE(st.st_mode)
        try:
            return replace_bytes(dfd, name, data, shown=path, mode=mode)
        except UnsafePath as exc:
            if exc.reason == "link":
                raise _swapped(path) from exc
            raise InvalidInput(f"{path} exists and is not a regular file") from exc
