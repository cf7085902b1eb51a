"""Reaching a directory below a root without following a link on the way.

A path checked with ``realpath`` can change before it is opened: another
process may swap a directory on the way for a symlink to ``/etc``. So the walk
opens each component **relative to the descriptor of the one before**, with
``O_NOFOLLOW``: a component that is (or became) a link makes the open fail
(``ELOOP``/``ENOTDIR``) instead of following it. The tool runner's file tools
(``services/tool_runner/fsops.py``) and the PRD files (``services/prd/files.py``)
both walk this way; each names its own errors.
"""

from __future__ import annotations

import contextlib
import errno
import os
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Final

__all__ = ["DIR_FLAGS", "dir_fd"]

#: How each directory on the way is opened: never through a link.
DIR_FLAGS: Final = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


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
