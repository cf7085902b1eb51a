"""Stopping a project, or cancelling a call, ends the call's whole process tree under either sandbox.

Through the real CLI and services: ``jidocode tools run <dir> bash …`` waits in a process of its
own while its command runs a tree that tries to outlive it — a ``setsid`` daemon, a double fork
that leaves its session and a ``nohup`` child (a ``trap`` the policy cannot judge: the call would be refused). Then the
project is stopped with ``jidocode projects stop`` (once, the tool runner stopped only the
project's MCP servers: the call, its launcher and the waiting CLI all went on), or the call is
cancelled as a conversation cancels it. Judged by the processes: every process whose command line
holds the test's marker (the CLI, bubblewrap or the Landlock launcher, every ``sleep``) is gone
before a generous deadline, and the CLI said why its call ended. How fast: ``bench/sandbox_stop.py``.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from jidocode.services.registry import serve_many
from jidocode.services.tool_runner.idempotency import ledger_key
from jidocode.shared import subjects
from jidocode.shared.bus import Bus
from jidocode.shared.clients import EngineClient, ToolsClient
from jidocode.shared.config import Config
from tests.helpers import wait_for_services
from tests.security.sandbox_support import MODES, make_project, processes_with, skip_unless, write_global

#: Bounds every wait on a condition (a loaded machine); the speed is bench/sandbox_stop.py's.
PATIENCE_S = 60.0
_SERVICES = ("engine", "project", "tool_runner")


def escaping_tree(marker: str) -> str:
    """A bash command whose processes try every way out of the call's process group and session.

    Each ``sleep`` has ``marker`` in its command line; the last line runs in the foreground, so
    the call goes on until it is stopped. ``started`` is printed once all of them run.
    """
    return "\n".join(
        [
            f"setsid -f sleep {marker}",  # a daemon: new session, its parent gone
            f"( setsid sleep {marker} & )",  # double fork into a session of its own
            f"nohup sleep {marker} >/dev/null 2>&1 &",
            f"exec sleep {marker}",
        ]
    )


@dataclass
class Stack:
    config: Config
    bus: Bus


@pytest.fixture
async def stack(config: Config) -> AsyncIterator[Stack]:
    """The engine, the project service and a tool runner in this process; the CLI runs outside."""
    stop = asyncio.Event()
    task = asyncio.create_task(serve_many(config, stop, _SERVICES))
    bus = await Bus.connect(config, "test-stop")
    try:
        await wait_for_services(config, _SERVICES, timeout=30)
        yield Stack(config, bus)
    finally:
        await bus.close()
        stop.set()
        await asyncio.wait_for(task, 30)


def _sleeps(marker: str) -> list[int]:
    """The command's ``sleep`` processes (not the CLI, whose arguments hold the marker too)."""
    out = []
    for pid in processes_with(marker):
        try:
            if Path(f"/proc/{pid}/comm").read_text() == "sleep\n":
                out.append(pid)
        except OSError:
            continue
    return out


async def _until(what: str, condition: object) -> None:
    """Wait until ``condition()`` holds (``/proc`` has no change notification: it is polled)."""

    async def poll() -> None:
        while not condition():  # type: ignore[operator]  # noqa: ASYNC110
            await asyncio.sleep(0.01)

    try:
        await asyncio.wait_for(poll(), PATIENCE_S)
    except TimeoutError:
        pytest.fail(f"still not true after {PATIENCE_S:g} s: {what}")


async def _run_in_cli(stack: Stack, root: Path, command: str, request_id: str) -> asyncio.subprocess.Process:
    """``jidocode tools run <root> bash`` in a process of its own (it waits for the call's result)."""
    env = {**os.environ, "NATS_URL": stack.config.nats_url, "JIDO_CODE_HOME": str(stack.config.jido_home)}
    args = json.dumps({"command": command})
    return await asyncio.create_subprocess_exec(
        str(Path(sys.executable).parent / "jidocode"),
        *("tools", "run", str(root), "bash", "--args", args, "--request-id", request_id),
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )


async def _cli(stack: Stack, *argv: str) -> tuple[int, str]:
    env = {**os.environ, "NATS_URL": stack.config.nats_url, "JIDO_CODE_HOME": str(stack.config.jido_home)}
    proc = await asyncio.create_subprocess_exec(
        str(Path(sys.executable).parent / "jidocode"),
        *argv,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    out, _ = await asyncio.wait_for(proc.communicate(), PATIENCE_S)
    assert proc.returncode is not None
    return proc.returncode, out.decode()


async def _started_tree(
    stack: Stack, tmp_path: Path, mode: str, marker: str, request_id: str
) -> tuple[str, asyncio.subprocess.Process]:
    """A project under ``mode`` whose CLI call runs :func:`escaping_tree` (all four sleeps up)."""
    skip_unless(mode)
    write_global(stack.config.jido_home, {"mode": mode})
    root = make_project(tmp_path / "proj")
    (root / ".jido" / "settings.json").write_text(json.dumps({"permissions": {"allow": ["Bash"]}}))
    cli = await _run_in_cli(stack, root, escaping_tree(marker), request_id)
    await _until(
        "the command's four sleeps run", lambda: len(_sleeps(marker)) == 4 or cli.returncode is not None
    )
    if cli.returncode is not None:
        out, err = await cli.communicate()
        pytest.fail(f"the call ended before it was stopped: {out.decode()} {err.decode()}")
    project = await EngineClient(stack.bus).start_project(str(root))
    return project.project_id, cli


async def _cli_result(cli: asyncio.subprocess.Process) -> tuple[int, dict[str, object]]:
    out, err = await asyncio.wait_for(cli.communicate(), PATIENCE_S)
    assert cli.returncode is not None
    try:
        return cli.returncode, json.loads(out)
    except ValueError:
        pytest.fail(f"the CLI printed no result (exit {cli.returncode}): {out.decode()!r} {err.decode()!r}")


@pytest.mark.parametrize("mode", MODES)
async def test_projects_stop_ends_a_running_calls_whole_tree_and_the_waiting_cli(
    mode: str, stack: Stack, tmp_path: Path
) -> None:
    marker = f"47.{os.getpid()}{MODES.index(mode)}1"
    project_id, cli = await _started_tree(stack, tmp_path, mode, marker, "stop-me")
    try:
        # by its directory, as a user types it (the id works too: tests/unit/cli/test_projects_stop.py)
        code, out = await _cli(stack, "projects", "stop", str(tmp_path / "proj"))
        assert code == 0 and "stopped" in out, out
        # the CLI, the launcher (or bubblewrap) and every sleep, daemons included
        await _until("no process of the call is left", lambda: not processes_with(marker))
        code, result = await _cli_result(cli)
    finally:
        if cli.returncode is None:
            cli.kill()
            await cli.wait()
    assert code == 1, result
    error = result["error"]
    assert isinstance(error, dict) and error["type"] == "cancelled", result
    assert f"its project {project_id} was stopped" in str(error["message"]), result


@pytest.mark.parametrize("mode", MODES)
async def test_a_cancel_ends_a_running_calls_whole_tree(mode: str, stack: Stack, tmp_path: Path) -> None:
    """The cancel a conversation sends for its call (here: a call outside any conversation)."""
    marker = f"48.{os.getpid()}{MODES.index(mode)}1"
    project_id, cli = await _started_tree(stack, tmp_path, mode, marker, "cancel-me")
    try:
        accepted = await ToolsClient(stack.bus, project_id).cancel("cancel-me", timeout=PATIENCE_S)
        assert accepted.cancel_requested
        await _until("no process of the call is left", lambda: not processes_with(marker))
        code, result = await _cli_result(cli)
    finally:
        if cli.returncode is None:
            cli.kill()
            await cli.wait()
    assert code == 1, result
    error = result["error"]
    assert isinstance(error, dict) and error == {**error, "type": "cancelled"}, result


@pytest.mark.parametrize("mode", MODES)
async def test_ctrl_c_on_the_waiting_cli_ends_the_calls_whole_tree(
    mode: str, stack: Stack, tmp_path: Path
) -> None:
    """A person who presses Ctrl-C on `jidocode tools run` stops the call, not only the wait."""
    marker = f"49.{os.getpid()}{MODES.index(mode)}1"
    project_id, cli = await _started_tree(stack, tmp_path, mode, marker, "interrupt-me")
    try:
        cli.send_signal(signal.SIGINT)
        await _until("no process of the call is left", lambda: not processes_with(marker))
        await asyncio.wait_for(cli.wait(), PATIENCE_S)
    finally:
        if cli.returncode is None:
            cli.kill()
            await cli.wait()
    assert cli.returncode == 130
    # ended by the cancel the CLI sent, not by running out its deadline after the CLI left
    kv = await stack.bus.js.key_value(subjects.BUCKET_TOOL_CALLS)
    record = json.loads((await kv.get(ledger_key(project_id, "interrupt-me"))).value or b"{}")
    assert record["state"] == "done" and record["result"]["error"]["type"] == "cancelled", record
