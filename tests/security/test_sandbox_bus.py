"""The OS sandbox through the real bus: a tool runner in a process of its own, with secrets in its env.

The runner is started like a deployed one (``python -m
jidocode.services.tool_runner``) with an LLM key, a cloud secret and a NATS-like
variable holding canary strings, so that ``/proc/<runner>/environ`` really
holds them; commands come in as ``RunTool`` requests and are judged by what
they print and leave on disk, and ``tool.started`` by what it says.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sys
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from jidocode.services.registry import serve_many
from jidocode.shared import subjects
from jidocode.shared.bus import Bus
from jidocode.shared.clients import EngineClient, ToolsClient
from jidocode.shared.config import Config
from jidocode.shared.envelope import Envelope
from jidocode.shared.events.tools import ToolCallMeta, ToolResult, ToolStarted
from tests.helpers import wait_for_services
from tests.security.sandbox_support import (
    CANARY_SECRET,
    make_project,
    processes_with,
    skip_unless,
    write_global,
)

StartRunner = Callable[..., Awaitable[int]]


@pytest.fixture
async def stack(config: Config) -> AsyncIterator[Config]:
    """Engine and project service in this process (the tool runner is started per test, outside)."""
    stop = asyncio.Event()
    task = asyncio.create_task(serve_many(config, stop, ("engine", "project")))
    try:
        await wait_for_services(config, ("engine", "project"), timeout=20)
        yield config
    finally:
        stop.set()
        await asyncio.wait_for(task, 20)


@pytest.fixture
async def start_runner(stack: Config) -> AsyncIterator[StartRunner]:
    """Start a tool runner process with canary secrets in its environment; its pid."""
    procs: list[asyncio.subprocess.Process] = []

    async def start(**env_overrides: str) -> int:
        env = {
            **os.environ,
            "NATS_URL": stack.nats_url,
            "JIDO_CODE_HOME": str(stack.jido_home),
            "JIDO_INSTANCE": f"sandbox-{len(procs)}",
            "OPENAI_API_KEY": CANARY_SECRET,
            "AWS_SECRET_ACCESS_KEY": CANARY_SECRET,
            "NATS_CANARY_TOKEN": CANARY_SECRET,
            **env_overrides,
        }
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "jidocode.services.tool_runner", env=env, stdin=asyncio.subprocess.DEVNULL
        )
        procs.append(proc)
        await wait_for_services(stack, ("tool_runner",), timeout=30)
        return proc.pid

    yield start
    for proc in procs:
        if proc.returncode is None:
            proc.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(proc.wait(), 20)
            except TimeoutError:
                proc.kill()
                await proc.wait()


class Started:
    """``tool.started`` signals, by request id."""

    def __init__(self) -> None:
        self.by_id: dict[str, ToolStarted] = {}
        self.changed = asyncio.Event()

    async def on(self, env: Envelope) -> None:
        if env.type == ToolStarted.TYPE:
            sig = ToolStarted.model_validate({**(env.data or {}), "type": env.type})
            self.by_id[sig.request_id] = sig
            self.changed.set()

    async def wait(self, request_id: str, timeout: float = 15.0) -> ToolStarted:
        async def loop() -> ToolStarted:
            while request_id not in self.by_id:
                self.changed.clear()
                await self.changed.wait()
            return self.by_id[request_id]

        return await asyncio.wait_for(loop(), timeout)


@pytest.fixture
async def started(bus: Bus) -> AsyncIterator[Started]:
    s = Started()
    sub = await bus.subscribe(subjects.signal(ToolStarted.TYPE), s.on)
    await bus.nc.flush()
    yield s
    await sub.unsubscribe()


#: What the user allows (globally: an untrusted project's allow rules count for nothing).
ALLOW = {"allow": ["Bash(./attack.sh)", "Bash(echo:*)", "Read"]}
ATTACK = {"command": "./attack.sh"}


def _global(jido_home: Path, **sandbox_settings: Any) -> None:
    write_global(jido_home, sandbox_settings, permissions=ALLOW)


async def _project(bus: Bus, root: Path, settings: dict[str, Any] | None = None) -> str:
    make_project(root)
    (root / ".jido" / "settings.json").write_text(json.dumps(settings or {}))
    info = await EngineClient(bus).start_project(str(root), timeout=10)
    return info.project_id


async def _run(bus: Bus, pid: str, name: str, args: dict[str, Any], request_id: str) -> ToolResult:
    meta = ToolCallMeta(request_id=request_id)
    return await ToolsClient(bus, pid).run(name, args, meta=meta, timeout=60)


def _attack(root: Path, script: str) -> None:
    """The command the policy allows (``./attack.sh``); what it does is the sandbox's business."""
    (root / "attack.sh").write_text("#!/bin/bash\n" + script)
    (root / "attack.sh").chmod(0o755)


@pytest.mark.parametrize("mode", ["bubblewrap", "landlock"])
async def test_runner_environ_and_env_hold_no_secret(
    bus: Bus, tmp_path: Path, start_runner: StartRunner, jido_home: Path, mode: str
) -> None:
    skip_unless(mode)
    _global(jido_home, mode=mode)
    runner_pid = await start_runner()
    assert CANARY_SECRET.encode() in Path(f"/proc/{runner_pid}/environ").read_bytes()  # the canary is there
    pid = await _project(bus, tmp_path / "proj")
    _attack(
        tmp_path / "proj",
        f"env; cat /proc/$PPID/environ; cat /proc/{runner_pid}/environ; cat /proc/*/environ; "
        f"tr '\\0' '\\n' < /proc/{runner_pid}/environ; echo done\n",
    )
    result = await _run(bus, pid, "bash", ATTACK, "env-1")
    assert result.ok, result
    text = str(result.data["output"])
    assert "done" in text
    assert CANARY_SECRET not in text
    assert "NATS_" not in text and "API_KEY" not in text


async def test_tool_started_says_which_sandbox(
    bus: Bus, tmp_path: Path, start_runner: StartRunner, started: Started, jido_home: Path
) -> None:
    _global(jido_home)
    await start_runner()
    pid = await _project(bus, tmp_path / "proj")
    (tmp_path / "proj" / "a.txt").write_text("a")
    assert (await _run(bus, pid, "bash", {"command": "echo hi"}, "st-1")).ok
    sig = await started.wait("st-1")
    assert sig.sandboxed is True and sig.sandbox in ("bubblewrap", "landlock")
    assert (await _run(bus, pid, "read_file", {"path": "a.txt"}, "st-2")).ok
    other = await started.wait("st-2")
    assert other.sandboxed is None and other.sandbox == ""


@pytest.mark.parametrize("mode", ["bubblewrap", "landlock"])
async def test_each_sandbox_through_the_bus(
    bus: Bus, tmp_path: Path, start_runner: StartRunner, started: Started, jido_home: Path, mode: str
) -> None:
    skip_unless(mode)
    _global(jido_home, mode=mode)
    await start_runner()
    root = tmp_path / "proj"
    pid = await _project(bus, root)
    marker = f"97531.{uuid.uuid4().int % 10**6}"
    outside = tmp_path / "outside-canary"
    _attack(
        root,
        f"setsid sleep {marker} & echo ok > inside.txt; echo P > {outside}; "
        "echo evil > .git/hooks/pre-commit; echo e > .envrc; echo done\n",
    )
    result = await _run(bus, pid, "bash", ATTACK, f"{mode}-1")
    # a protected path changed: put back at once, the command stopped, the call failed
    assert result.error is not None and result.error.details.get("protected_restored"), result
    assert (await started.wait(f"{mode}-1")).sandbox == mode
    assert not outside.exists()
    assert not (root / ".git" / "hooks" / "pre-commit").exists()
    assert not (root / ".envrc").exists()
    assert (root / "inside.txt").read_text() == "ok\n"  # the control: work inside the root is kept
    assert processes_with(marker) == []


async def test_no_sandbox_refuses_bash_and_runs_nothing(
    bus: Bus, tmp_path: Path, start_runner: StartRunner, started: Started, jido_home: Path
) -> None:
    # bubblewrap demanded, and not found on the runner's PATH: no weaker fallback
    _global(jido_home, mode="bubblewrap")
    await start_runner(PATH="/nonexistent")
    root = tmp_path / "proj"
    pid = await _project(bus, root)
    _attack(root, "echo ran > ran.txt\n")
    result = await _run(bus, pid, "bash", ATTACK, "none-1")
    assert result.error is not None and result.error.type == "permission_denied"
    assert result.error.details.get("sandbox") == "unavailable"
    assert "bubblewrap" in result.error.message
    assert not (root / "ran.txt").exists()
    sig = await started.wait("none-1")
    assert sig.sandboxed is None and sig.sandbox == "unavailable"


async def test_only_the_global_settings_turn_the_sandbox_off(
    bus: Bus, tmp_path: Path, start_runner: StartRunner, started: Started, jido_home: Path
) -> None:
    _global(jido_home)
    await start_runner()
    # a project asking for no sandbox is ignored
    root = tmp_path / "proj"
    pid = await _project(bus, root, {"sandbox": {"mode": "off", "network": True}})
    _attack(root, f"echo P > {tmp_path}/escaped; echo done\n")
    assert (await _run(bus, pid, "bash", ATTACK, "off-1")).ok
    assert (await started.wait("off-1")).sandboxed is True
    assert not (tmp_path / "escaped").exists()
    # the user's global settings can: every tool.started then says so
    _global(jido_home, mode="off")
    assert (await _run(bus, pid, "bash", ATTACK, "off-2")).ok
    sig = await started.wait("off-2")
    assert sig.sandboxed is False and sig.sandbox == "off"
    assert (tmp_path / "escaped").exists()  # the control: unsandboxed, the same command escapes


async def test_network_needs_the_global_settings(
    bus: Bus, tmp_path: Path, start_runner: StartRunner, jido_home: Path
) -> None:
    seen: list[bytes] = []

    async def on(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        seen.append(await reader.read(100))
        writer.close()

    server = await asyncio.start_server(on, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        _global(jido_home)
        await start_runner()
        root = tmp_path / "proj"
        pid = await _project(bus, root, {"sandbox": {"network": True}})  # the project alone cannot
        _attack(root, f"exec 3<>/dev/tcp/127.0.0.1/{port} && echo hello >&3 && echo CONNECTED\n")
        r = await _run(bus, pid, "bash", ATTACK, "net-1")
        assert r.ok and "CONNECTED" not in str(r.data["output"])
        assert seen == []
        _global(jido_home, network=True)
        r = await _run(bus, pid, "bash", ATTACK, "net-2")
        assert r.ok and "CONNECTED" in str(r.data["output"])
    finally:
        server.close()
        with contextlib.suppress(Exception):
            await server.wait_closed()
