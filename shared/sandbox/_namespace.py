"""The pid namespace of a bubblewrap call, and how to end it whenever a stop comes.

bubblewrap's process outside the sandbox (the *monitor*, the runner's child)
clones the namespace's first process (pid 1 inside). That process sets the
sandbox up and only then asks to die with its parent (``PR_SET_PDEATHSIG``):
a stop that kills the monitor during the set-up (a cancel right after the
call started) would leave the namespace running the command for good, with
nobody to end it. So bubblewrap is started with ``--info-fd`` and writes the
first process's pid there before that process does anything; the runner holds
it by a pidfd and kills it: SIGKILL to a pid namespace's first process, sent
from outside, ends every process of the namespace.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
from typing import Any, Final

__all__ = ["Namespace", "child_pid"]

_CHILD_PID: Final = re.compile(rb'"child-pid"\s*:\s*(\d+)\D')
#: bubblewrap's info is a few hundred bytes; more is not bubblewrap's.
_INFO_CAP: Final = 64 * 1024


def child_pid(info: bytes) -> int | None:
    """The ``child-pid`` of bubblewrap's ``--info-fd`` JSON, once it is complete in ``info``."""
    match = _CHILD_PID.search(info)
    return int(match.group(1)) if match else None


def _parent(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return int(f.read().rsplit(b")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return None


class Namespace:
    """Reads the namespace's first process from bubblewrap's info descriptor, and ends it (:meth:`end`).

    ``fd`` (the read end of the info pipe) stays its owner's to close, after :meth:`close`.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop, fd: int, monitor_pid: int) -> None:
        self._loop = loop
        self._fd = fd
        self._monitor = monitor_pid
        self._info = b""
        self._pid: int | None = None
        self._pidfd: int | None = None
        #: Done once the first process is known, or the info ended without it.
        self.known: asyncio.Future[None] = loop.create_future()
        os.set_blocking(fd, False)
        loop.add_reader(fd, self._readable)
        self._watching = True

    @property
    def pid(self) -> int | None:
        """The namespace's first process, as seen from outside (``None`` until known)."""
        return self._pid

    def _readable(self) -> None:
        try:
            chunk = os.read(self._fd, 4096)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            chunk = b""
        self._info += chunk
        pid = child_pid(self._info)
        if pid is not None:
            self._hold(pid)
        if pid is not None or not chunk or len(self._info) > _INFO_CAP:
            self._stop_reading()
            if not self.known.done():
                self.known.set_result(None)

    def _hold(self, pid: int) -> None:
        pidfd: int | None
        try:
            pidfd = os.pidfd_open(pid)
        except ProcessLookupError:
            return  # gone already, and with it the namespace
        except OSError:
            pidfd = None  # a kernel without pidfds: signalled by pid, checked again then
        if _parent(pid) != self._monitor:
            # it died and its pid was reused already: not ours to kill
            if pidfd is not None:
                os.close(pidfd)
            return
        self._pid, self._pidfd = pid, pidfd

    def kill(self) -> None:
        """SIGKILL the namespace's first process (so the whole namespace), if it is known and alive."""
        with contextlib.suppress(ProcessLookupError, PermissionError):
            if self._pidfd is not None:
                signal.pidfd_send_signal(self._pidfd, signal.SIGKILL)
            elif self._pid is not None and _parent(self._pid) == self._monitor:
                os.kill(self._pid, signal.SIGKILL)

    async def end(self, monitor: asyncio.subprocess.Process, patience: float) -> None:
        """Kill the namespace once its first process is known, or the monitor ended without one.

        Waits at most ``patience`` for either; the monitor is killed by the caller afterwards.
        """
        if not self.known.done() and monitor.returncode is None:
            exited: asyncio.Future[Any] = asyncio.ensure_future(monitor.wait())
            either: list[asyncio.Future[Any]] = [self.known, exited]
            try:
                await asyncio.wait(either, timeout=patience, return_when=asyncio.FIRST_COMPLETED)
            finally:
                exited.cancel()
        self.kill()

    def close(self) -> None:
        """Stop reading and let go of the pidfd (idempotent)."""
        self._stop_reading()
        if self._pidfd is not None:
            pidfd, self._pidfd = self._pidfd, None
            os.close(pidfd)

    def _stop_reading(self) -> None:
        if self._watching:
            self._watching = False
            self._loop.remove_reader(self._fd)
