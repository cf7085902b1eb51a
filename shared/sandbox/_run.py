"""Running a prepared command to its end: merged output capped, a timeout, and nothing left behind.

Moved here from the bash tool so every caller that starts a process through :func:`prepare`
(the bash tool, the PRD loop's quality checks) stops it the same way:

- stdin is ``/dev/null``; stdout and stderr are merged into one pipe of our own and capped;
- everything the command starts ends with the call, ``setsid`` children included: under
  bubblewrap the call's pid namespace ends, under Landlock the launcher (a child subreaper)
  kills what is left; without a sandbox the process group is killed (a ``setsid`` child
  escapes it);
- a timeout raises :class:`~jidocode.shared.errors.RequestTimeout` whose ``details`` hold the
  result so far; a cancel stops the command before it is re-raised.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from collections.abc import Callable, Mapping
from typing import Any, Final, TypeVar

from jidocode.shared.errors import RequestTimeout

from ._namespace import Namespace

__all__ = ["TRUNCATION_MARK", "OnChunk", "cap_text", "run_command"]

T = TypeVar("T")

#: Called (synchronously, on the event loop) with every chunk of output as it is read.
OnChunk = Callable[[bytes], None]

#: How long the Landlock launcher gets to kill what the command left before its group is killed.
_STOP_GRACE_S: Final = 5.0
TRUNCATION_MARK: Final = "\n[… output truncated at {cap} bytes; {total} bytes in all …]"


def cap_text(data: bytes, cap: int) -> tuple[str, bool]:
    """Decode ``data`` (invalid UTF-8 replaced), cut at ``cap`` bytes with a marker."""
    if len(data) <= cap:
        return data.decode("utf-8", "replace"), False
    head = data[:cap].decode("utf-8", "ignore")
    return head + TRUNCATION_MARK.format(cap=cap, total=len(data)), True


def _kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


class _Output:
    """The command's merged output, read from the pipe's read end by a reader callback of the loop.

    The descriptor is read here and closed by :func:`run_command` only, once (after
    :meth:`stop`). Not ``loop.connect_read_pipe``: uvloop's pipe transport closes the
    descriptor itself and then closes the file object it was given, i.e. the same number
    a second time, and in between a worker thread (another call's :func:`~jidocode.shared.sandbox.prepare`
    pinning descriptors for bubblewrap) may have been given that number: the other call's
    bind source or pipe was closed under it.
    """

    def __init__(
        self, loop: asyncio.AbstractEventLoop, fd: int, cap: int, on_chunk: OnChunk | None = None
    ) -> None:
        self._loop = loop
        self._fd = fd
        self._cap = cap
        self._on_chunk = on_chunk
        self._kept = 0
        self.sink: list[bytes] = []
        self.total = 0
        #: Done at end of file (the last holder of the write end closed it), or with a read error.
        self.eof: asyncio.Future[None] = loop.create_future()
        os.set_blocking(fd, False)
        loop.add_reader(fd, self._readable)
        self._watching = True

    def _readable(self) -> None:
        try:
            chunk = os.read(self._fd, 65536)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            self.stop()
            self.eof.set_exception(exc)
            return
        if not chunk:
            self.stop()
            self.eof.set_result(None)
            return
        self.total += len(chunk)
        if self._on_chunk is not None:
            self._on_chunk(chunk)
        if self._kept < self._cap + 1:
            piece = chunk[: self._cap + 1 - self._kept]
            self.sink.append(piece)
            self._kept += len(piece)

    def stop(self) -> None:
        """Read no more (idempotent); the descriptor stays open for its owner to close."""
        if self._watching:
            self._watching = False
            self._loop.remove_reader(self._fd)


async def _stop(
    proc: asyncio.subprocess.Process, *, graceful: bool, namespace: Namespace | None = None
) -> None:
    """End the call's processes: a bubblewrap call's pid namespace (by its first process), or SIGTERM to
    a Landlock launcher first (it kills its tree); then the group."""
    if namespace is not None:
        await namespace.end(proc, _STOP_GRACE_S)
    if graceful and proc.returncode is None:
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signal.SIGTERM)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(proc.wait()), timeout=_STOP_GRACE_S)
    _kill_group(proc.pid)  # start_new_session: the child leads a group of its own id


async def _to_the_end(work: asyncio.Future[T]) -> tuple[T, bool]:
    """``work``'s result, awaited to its end even when the caller is cancelled meanwhile (once or
    more), and whether it was: the caller raises that cancel once the work is done.

    For what must not be left half-done: starting the process (asyncio's own clean-up of a start
    cancelled half-way kills only the process it started, not what that process had started
    already — bubblewrap's namespace, the Landlock launcher's command — and gives the caller no
    pid to stop them by), and stopping it (a second cancel during the stop would let the call
    return, and its sandbox be taken down, while the command still runs).
    """
    cancelled = False
    while True:
        try:
            return await asyncio.shield(work), cancelled
        except asyncio.CancelledError:
            if work.cancelled():
                raise
            cancelled = True  # the work goes on; the caller is told once it is done


async def _end(proc: asyncio.subprocess.Process, *, graceful: bool, namespace: Namespace | None) -> None:
    """Stop a command still running (:func:`_stop`), then kill and reap the process itself."""
    await _stop(proc, graceful=graceful, namespace=namespace)
    with contextlib.suppress(ProcessLookupError):
        proc.kill()
    with contextlib.suppress(ProcessLookupError):
        await proc.wait()


async def run_command(
    argv: list[str],
    *,
    cwd: str,
    timeout_s: float,
    output_cap: int,
    env: Mapping[str, str],
    pass_fds: tuple[int, ...] = (),
    graceful: bool = False,
    info_fd: int | None = None,
    on_chunk: OnChunk | None = None,
    on_spawn: Callable[[asyncio.subprocess.Process], None] | None = None,
) -> dict[str, Any]:
    """Run ``argv``; on timeout or cancellation stop it (:func:`_stop`) and everything it started.

    ``info_fd``: the read end of bubblewrap's ``--info-fd`` (its pid namespace is then ended by
    killing the namespace's first process, even when the stop comes during bubblewrap's set-up).
    ``on_chunk``: called with every chunk read, uncapped, as it comes (progress of a long
    command); it must not block nor raise (it runs in the event loop's reader callback).
    ``on_spawn``: called with the process as soon as it started (``Launch.attach``: the guard
    may then stop it the moment it changes a protected path).
    """
    started = time.monotonic()
    loop = asyncio.get_running_loop()
    # Our own pipe, not asyncio.subprocess.PIPE: asyncio's wait() would not return before every
    # holder of the pipe (a backgrounded grandchild) closed it, hiding the shell's exit. Each end
    # is closed exactly once: the write end by :func:`_start` (or here when reading cannot
    # start), the read end here. A descriptor closed twice closes whatever another call (or a
    # worker thread) was given under that number in between.
    rfd, wfd = os.pipe()
    namespace: Namespace | None = None
    try:
        try:
            out = _Output(loop, rfd, output_cap, on_chunk)
        except BaseException:
            os.close(wfd)
            raise
        proc, cancelled = await _start(argv, out, wfd, cwd=cwd, env=env, pass_fds=pass_fds, on_spawn=on_spawn)
        if info_fd is not None:
            namespace = Namespace(loop, info_fd, proc.pid)
        timed_out = await _wait_and_stop(
            proc, out, timeout_s=timeout_s, graceful=graceful, namespace=namespace, cancelled=cancelled
        )
    finally:
        if namespace is not None:
            namespace.close()
        os.close(rfd)
    result = _result(proc, out, output_cap, started)
    if timed_out:
        raise RequestTimeout(
            f"command timed out after {timeout_s:g} s; everything it started was killed", details=result
        )
    return result


async def _start(
    argv: list[str],
    out: _Output,
    wfd: int,
    *,
    cwd: str,
    env: Mapping[str, str],
    pass_fds: tuple[int, ...],
    on_spawn: Callable[[asyncio.subprocess.Process], None] | None,
) -> tuple[asyncio.subprocess.Process, bool]:
    """Start ``argv`` writing into ``wfd`` (closed here, once, whatever happens); the process, and
    whether the caller was cancelled while it started (the start is never left half-done)."""
    try:
        try:
            spawn = asyncio.ensure_future(
                asyncio.create_subprocess_exec(
                    *argv,
                    cwd=cwd,
                    env=dict(env),
                    stdin=asyncio.subprocess.DEVNULL,
                    stdout=wfd,
                    stderr=asyncio.subprocess.STDOUT,
                    start_new_session=True,
                    pass_fds=pass_fds,
                )
            )
            proc, cancelled = await _to_the_end(spawn)
            if on_spawn is not None:
                on_spawn(proc)
        finally:
            os.close(wfd)
    except BaseException:
        out.stop()
        raise
    return proc, cancelled


async def _wait_and_stop(
    proc: asyncio.subprocess.Process,
    out: _Output,
    *,
    timeout_s: float,
    graceful: bool,
    namespace: Namespace | None,
    cancelled: bool,
) -> bool:
    """Wait for the command (at most ``timeout_s``), then stop everything it started and read its
    output to the end; whether it timed out. A cancel (now, or during the start) stops it first."""
    timed_out = False
    try:
        try:
            if cancelled:
                raise asyncio.CancelledError  # stopped like a call cancelled while it runs (below)
            await asyncio.wait_for(proc.wait(), timeout=timeout_s)
        except TimeoutError:
            timed_out = True
        # the command is gone (or timed out): nothing it started may outlive the call
        await _stop(proc, graceful=graceful, namespace=namespace)
        await proc.wait()
        # a process that escaped (no sandbox, a session of its own) may still hold the pipe
        await asyncio.wait([out.eof], timeout=5.0)
        if out.eof.done():
            out.eof.result()  # a read error is raised
    finally:
        out.stop()
        if proc.returncode is None:
            _, again = await _to_the_end(
                asyncio.ensure_future(_end(proc, graceful=graceful, namespace=namespace))
            )
            if again:
                raise asyncio.CancelledError  # cancelled (again) while it stopped the command
    return timed_out


def _result(
    proc: asyncio.subprocess.Process, out: _Output, output_cap: int, started: float
) -> dict[str, Any]:
    """The result of a command that ended: exit code, capped output, sizes and duration."""
    output, truncated = cap_text(b"".join(out.sink), output_cap)
    return {
        "exit_code": proc.returncode,
        "output": output,
        "truncated": truncated,
        "output_bytes": out.total,
        "duration_ms": round((time.monotonic() - started) * 1000, 1),
    }
