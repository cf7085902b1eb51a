"""A call stopped at any moment leaves no process behind, under either sandbox.

CI once saw the command of a cancelled bubblewrap call still running 5 s after
the call answered ``cancelled``. bubblewrap's namespace's first process calls
``setsid`` and only afterwards asks to die with its parent (``PR_SET_PDEATHSIG``,
in its init loop, after it closed its extra descriptors); a stop that kills
bubblewrap's outside process in between reaches neither that process (another
session: ``killpg`` misses it) nor the command, which then runs for its whole
duration. The first test holds bubblewrap in that window (strace delays the
namespace's first process while it closes its descriptors), shows the old stop
leaves the namespace alive, and that killing the namespace's first process
(:class:`jidocode.shared.sandbox.Namespace`, from ``--info-fd``) ends it. The
second stops real calls through ``run_command`` at many moments of their start;
it found a second way out: a cancel while asyncio was still starting the process
(asyncio then kills only that process, and the caller never gets its pid), so
bubblewrap's namespace or the Landlock launcher's command went on.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
from collections.abc import Callable
from pathlib import Path

import pytest

from jidocode.services.tool_runner.tools.bash import run_command
from jidocode.shared import sandbox
from tests.security.sandbox_support import MODES, make_project, processes_with, skip_unless, write_global

#: Every wait below is on a condition; this only bounds it (generous: a loaded machine).
PATIENCE_S = 30.0


async def _until(what: str, condition: Callable[[], bool]) -> None:
    """Wait until ``condition()`` holds (``/proc`` has no change notification, so it is polled)."""

    async def poll() -> None:
        while not condition():  # noqa: ASYNC110
            await asyncio.sleep(0.01)

    try:
        await asyncio.wait_for(poll(), PATIENCE_S)
    except TimeoutError:
        pytest.fail(f"still not true after {PATIENCE_S:g} s: {what}")


def _stat(pid: int) -> list[str] | None:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None


def _alive(pid: int) -> bool:
    fields = _stat(pid)
    return fields is not None and fields[0] != "Z"


def _wchan(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/wchan").read_text()
    except OSError:
        return ""


def _start(launch: sandbox.Launch) -> asyncio.Task[dict[str, object]]:
    """The launch's command run as a bash call runs it (a long sleep: it ends only when stopped)."""
    return asyncio.create_task(
        run_command(
            launch.argv,
            cwd=launch.cwd,
            timeout_s=120,
            output_cap=4096,
            env=launch.env,
            pass_fds=launch.pass_fds,
            graceful=launch.graceful_stop,
            info_fd=launch.info_fd,
        )
    )


def test_child_pid_is_read_once_complete() -> None:
    info = b'{\n    "child-pid": 4242,\n    "pid-namespace": 4026531836\n}\n'
    assert sandbox.child_pid(info) == 4242
    assert sandbox.child_pid(info[:18]) is None  # the number may still go on
    assert sandbox.child_pid(b'{\n    "child-pid": 42') is None
    assert sandbox.child_pid(b"") is None


async def test_a_stop_while_bubblewrap_sets_up_kills_its_namespace(tmp_path: Path) -> None:
    skip_unless("bubblewrap")
    strace = shutil.which("strace")
    if strace is None:
        pytest.skip("strace is not installed (it holds bubblewrap in the window)")
    root = make_project(tmp_path / "proj")
    marker = f"97.{os.getpid()}3"
    launch = await sandbox.prepare(["/bin/bash", "-c", f"sleep {marker}"], root=str(root))
    assert launch.info_fd is not None
    # 1 s per getdents64: only the namespace's first process lists descriptors (closing them
    # after setsid and before asking to die with its parent)
    held = [strace, "-f", "-o", "/dev/null", "-e", "trace=getdents64"]
    held += ["-e", "inject=getdents64:delay_exit=1000000", *launch.argv]
    tracer = await asyncio.create_subprocess_exec(
        *held, cwd=launch.cwd, env=launch.env, pass_fds=launch.pass_fds, start_new_session=True
    )
    namespace: sandbox.Namespace | None = None
    try:
        monitors: list[int] = []

        def monitor_started() -> bool:
            monitors[:] = [p for p in processes_with(marker) if (_stat(p) or ["", ""])[1] == str(tracer.pid)]
            return bool(monitors)

        await _until("bubblewrap runs under strace", monitor_started)
        monitor = monitors[0]
        namespace = sandbox.Namespace(asyncio.get_running_loop(), launch.info_fd, monitor)
        await asyncio.wait_for(namespace.known, PATIENCE_S)
        first = namespace.pid
        assert first is not None and (_stat(first) or ["", ""])[1] == str(monitor)
        command: list[int] = []

        def command_runs() -> bool:
            command[:] = [
                p for p in processes_with(marker) if Path(f"/proc/{p}/comm").read_text() == "sleep\n"
            ]
            return bool(command)

        await _until("the command runs (its pid 1 is closing descriptors)", command_runs)
        # what the stop did before: bubblewrap's outside process only (and its process group)
        os.kill(monitor, signal.SIGKILL)
        await _until("pid 1 reached its init loop", lambda: _wchan(first) == "do_wait" or not _alive(first))
        assert _alive(first) and _alive(command[0]), "the window was missed: pid 1 died with bubblewrap"

        namespace.kill()
        await _until("the namespace ended", lambda: not _alive(first) and not _alive(command[0]))
    finally:
        if namespace is not None:
            namespace.kill()
            namespace.close()
        with contextlib.suppress(ProcessLookupError):  # strace ends with its last tracee
            os.killpg(tracer.pid, signal.SIGKILL)
        await tracer.wait()
        await launch.close()


@pytest.mark.parametrize("mode", MODES)
async def test_a_call_cancelled_at_any_moment_leaves_nothing(
    mode: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    skip_unless(mode)
    jido_home = tmp_path / "jido_home"
    write_global(jido_home, {"mode": mode})
    root = make_project(tmp_path / "proj")
    moments = [0.0, 0.0005, 0.001, 0.002, 0.004, 0.008, 0.016, 0.032, 0.064, 0.128, 0.256]
    markers = []
    for i, moment in enumerate(moments):
        marker = f"98.{os.getpid()}{i}7"
        markers.append(marker)
        launch = await sandbox.prepare(
            ["/bin/bash", "-c", f"sleep {marker}"], root=str(root), jido_home=str(jido_home)
        )
        assert launch.mode == mode
        try:
            call = _start(launch)
            # not a synchronization: the moment of the stop is what varies
            await asyncio.sleep(moment)
            call.cancel()
            with pytest.raises(asyncio.CancelledError):
                await call
        finally:
            await launch.close()
        # run_command returns once its own process is gone; what it started must be gone too
        await _until(
            f"no process of the call stopped after {moment} s", lambda m=marker: not processes_with(m)
        )


@pytest.mark.parametrize("mode", MODES)
async def test_a_call_cancelled_twice_returns_only_once_its_processes_are_gone(
    mode: str, tmp_path: Path
) -> None:
    """A second cancel while the first one's stop runs (shutdown's cancel of every call beside a
    handler's own, a user's cancel beside a stop's) must not let the call return, and its sandbox
    be taken down, while the command still runs."""
    skip_unless(mode)
    jido_home = tmp_path / "jido_home"
    write_global(jido_home, {"mode": mode})
    root = make_project(tmp_path / "proj")
    for i, moment in enumerate([0.0, 0.002, 0.02, 0.2]):
        marker = f"96.{os.getpid()}{i}7"
        launch = await sandbox.prepare(
            ["/bin/bash", "-c", f"sleep {marker}"], root=str(root), jido_home=str(jido_home)
        )
        try:
            call = _start(launch)
            await asyncio.sleep(moment)  # not a synchronization: the moment of the stop is what varies
            call.cancel()
            await asyncio.sleep(0)  # the first cancel is being handled
            call.cancel()
            with pytest.raises(asyncio.CancelledError):
                await call
            # as in the test above: the call returns once its own process is gone, and the sandbox's
            # namespace goes down with it; its last processes may take a moment to be reaped (seen
            # in CI at moment 0.0), but a namespace left running would keep the 96 s sleep alive
            await _until(
                f"no process of the call cancelled twice after {moment} s",
                lambda m=marker: not processes_with(m),
            )
        finally:
            await launch.close()
