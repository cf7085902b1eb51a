"""Concurrent sandboxed bash calls: every call runs its command once, no call closes another's descriptor.

The chaos test saw ~1 call in 3,000 fail under uvloop with bubblewrap's ``Can't
find source path /proc/self/fd/N`` (the command never ran) or ``io_error: Bad
file descriptor`` (sometimes after it ran). The cause: the output pipe was read
through ``loop.connect_read_pipe(…, os.fdopen(rfd))``, and uvloop's transport
closes the descriptor itself and then the file object it was given, so the
same number a second time; a worker thread of another call (``prepare``
pinning the bind sources of bubblewrap) that was given that number in between
lost its descriptor. The first test shows the second close itself, whatever
the timing; the second runs the race: many calls at once with a thread that
keeps being given freshly closed numbers, as ``prepare``'s worker threads are.
"""

from __future__ import annotations

import asyncio
import collections
import os
import shutil
import subprocess
import sys
import threading
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import pytest

from jidocode.shared.events.tools import ToolResult
from jidocode.shared.policy import Policy
from tests.security.sandbox_support import make_project, sh, skip_unless, write_global

LOOPS = ("asyncio", "uvloop")

#: Runs run_command a few times on the given loop; strace watches its main thread's close() calls.
_CLOSES_ONCE = """
import asyncio, sys
from jidocode.services.tool_runner.tools.bash import run_command

async def main():
    for i in range(5):
        r = await run_command(["/bin/echo", str(i)], cwd="/", timeout_s=30, output_cap=4096, env={})
        assert r["output"].strip() == str(i) and r["exit_code"] == 0, r

if sys.argv[1] == "uvloop":
    import uvloop
    uvloop.run(main())
else:
    asyncio.run(main())
"""


def _run_on(loop: str, main: Callable[[], Coroutine[Any, Any, None]]) -> None:
    if loop == "uvloop":
        uvloop = pytest.importorskip("uvloop")
        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            runner.run(main())
    else:
        with asyncio.Runner() as runner:
            runner.run(main())


@pytest.mark.parametrize("loop", LOOPS)
def test_run_command_closes_each_descriptor_once(loop: str, tmp_path: Path) -> None:
    """No ``close()`` of the calling thread fails with EBADF: a descriptor closed twice is a number
    that, in a busy process, already belonged to someone else the second time."""
    if loop == "uvloop":
        pytest.importorskip("uvloop")
    strace = shutil.which("strace")
    if strace is None:
        pytest.skip("strace is not installed")
    trace = tmp_path / "trace"
    # no -f: the interpreter's main thread only (the children's own closes are theirs)
    done = subprocess.run(
        [strace, "-qq", "-e", "trace=close", "-o", str(trace), sys.executable, "-c", _CLOSES_ONCE, loop],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=Path(__file__).resolve().parents[2],
    )
    if done.returncode != 0 and "ptrace" in done.stderr:
        pytest.skip(f"strace cannot trace here: {done.stderr.strip()}")
    assert done.returncode == 0, done.stderr
    closed_twice = [line for line in trace.read_text().splitlines() if "EBADF" in line]
    assert closed_twice == []


class _Squatter:
    """A thread that keeps taking the lowest free descriptor and checks that nobody closed it under it."""

    def __init__(self, path: str) -> None:
        self._path = path
        self._ino = os.stat(path).st_ino
        self._stop = threading.Event()
        self.lost: list[str] = []
        self.rounds = 0
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            fd = os.open(self._path, os.O_PATH | os.O_CLOEXEC)
            self.rounds += 1
            try:
                if os.fstat(fd).st_ino != self._ino:
                    self.lost.append(f"fd {fd} was closed and given to someone else")
                    continue  # not ours any more: not ours to close
            except OSError as exc:
                self.lost.append(f"fd {fd}: {exc}")
                continue
            try:
                os.close(fd)
            except OSError as exc:
                self.lost.append(f"fd {fd} closed under us: {exc}")

    def __enter__(self) -> _Squatter:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def _policy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Policy:
    skip_unless("bubblewrap")
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    jido_home = tmp_path / "jido_home"
    write_global(jido_home, {"mode": "bubblewrap"})
    root = make_project(tmp_path / "proj")
    return Policy.build(str(root), jido_home=str(jido_home), home=str(home))


@pytest.mark.parametrize("loop", LOOPS)
def test_concurrent_calls_each_run_once(loop: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """300 bubblewrap calls, 50 at a time, each appending its number: all succeed, each line once."""
    policy = _policy(tmp_path, monkeypatch)
    root = Path(policy.sandbox.root)
    calls, at_once = 300, 50
    results: dict[int, ToolResult] = {}

    async def main() -> None:
        gate = asyncio.Semaphore(at_once)

        async def one(i: int) -> None:
            async with gate:
                results[i] = await sh(policy, f"echo {i} >> appended.txt")

        await asyncio.gather(*(one(i) for i in range(calls)))

    with _Squatter(str(tmp_path)) as squatter, _Squatter(str(root)) as squatter2:
        _run_on(loop, main)
    failed = {
        i: (r.error.model_dump() if r.error else r.data)
        for i, r in results.items()
        if not r.ok or r.data["exit_code"] != 0
    }
    assert failed == {}
    counts = collections.Counter((root / "appended.txt").read_text().split())
    assert {i for i in range(calls) if counts[str(i)] != 1} == set()
    assert squatter.lost + squatter2.lost == []
    assert squatter.rounds and squatter2.rounds
