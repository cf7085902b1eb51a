"""`jidocode probe` accepts only an answer from a replica on this host (or JIDO_INSTANCE)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from jidocode.cli.status import is_local, runs_here


def _ping(instance: str) -> dict[str, object]:
    return {"name": "jidocode-engine", "metadata": {"instance": instance}}


def test_hostname_match_by_default() -> None:
    assert is_local(_ping("engine/box1-123"), "engine", None, "box1")
    assert not is_local(_ping("engine/box2-123"), "engine", None, "box1")
    assert not is_local(_ping("engine/box10-123"), "engine", None, "box1")  # a prefix is not a match


def test_explicit_instance_must_match_exactly() -> None:
    assert is_local(_ping("engine/engine-0"), "engine", "engine-0", "anything")
    assert not is_local(_ping("engine/engine-1"), "engine", "engine-0", "anything")


def test_another_service_never_counts() -> None:
    assert not is_local(_ping("project/box1-1"), "engine", None, "box1")
    assert not is_local({"name": "x"}, "engine", None, "box1")


def test_a_child_of_up_is_local_by_its_process_environment() -> None:
    """`jidocode up` names its children `<service>-<pid of up>`, which names no host: the
    probe finds the process that reports that name here (issue 13: `probe engine` exited 1)."""
    env = {**os.environ, "JIDO_INSTANCE": "engine-4242"}
    child = subprocess.Popen(
        [sys.executable, "-c", "import sys; print('ready', flush=True); sys.stdin.read()"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env=env,
    )
    try:
        # Popen may return (vfork) before the kernel has set up the new program's environment:
        # /proc/<pid>/environ then reads empty. The child's first line says it runs.
        assert child.stdout is not None and child.stdout.readline() == b"ready\n"
        ping = {
            "name": "jidocode-engine",
            "metadata": {"instance": "engine/engine-4242", "pid": str(child.pid)},
        }
        assert is_local(ping, "engine", None, "box1")
        assert runs_here(child.pid, "engine-4242")
        # Another name, another service, or a pid whose process reports no such name: not here.
        assert not runs_here(child.pid, "engine-4243")
        mine = {
            "name": "jidocode-engine",
            "metadata": {"instance": "engine/engine-4242", "pid": str(os.getpid())},
        }
        assert not is_local(mine, "engine", None, "box1")
        assert not is_local(ping, "project", None, "box1")
        # An explicit JIDO_INSTANCE here still wants exactly that replica.
        assert not is_local(ping, "engine", "engine-1", "box1")
    finally:
        assert child.stdin is not None
        child.stdin.close()
        child.wait(30)


def test_a_pid_of_another_host_does_not_count(tmp_path: Path) -> None:
    (tmp_path / "77").mkdir()
    (tmp_path / "77" / "environ").write_bytes(b"PATH=/bin\0JIDO_INSTANCE=engine-9\0")
    ping = {"name": "jidocode-engine", "metadata": {"instance": "engine/engine-1", "pid": "77"}}
    assert not is_local(ping, "engine", None, "box1", proc=tmp_path)  # pid 77 here is another replica
    assert is_local(
        {**ping, "metadata": {"instance": "engine/engine-9", "pid": "77"}}, "engine", None, "x", tmp_path
    )
    assert not runs_here("78", "engine-9", tmp_path)  # no such process
    assert not runs_here("../77", "engine-9", tmp_path)  # not a pid
    assert not runs_here(None, "engine-9", tmp_path)
