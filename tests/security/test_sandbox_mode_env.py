"""``JIDO_SANDBOX_MODE`` replaces the global ``sandbox.mode``: it picks a sandbox, never turns it off.

It is how ``.ci/run`` runs the sandbox-dependent tests again under Landlock on a machine where
``auto`` picks bubblewrap (decision 0316). Judged through the real tool runner on the bus: the
sandbox a bash call ran in is what its result says, and a value the variable may not hold refuses
the call before anything runs (as a settings file with an error does, decision 0304).
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from jidocode.services.registry import serve_many
from jidocode.shared import sandbox
from jidocode.shared.bus import Bus
from jidocode.shared.clients import EngineClient, ToolsClient
from jidocode.shared.config import Config
from jidocode.shared.errors import PermissionDenied
from jidocode.shared.events.tools import ToolCallMeta, ToolResult
from tests.helpers import wait_for_services
from tests.security.sandbox_support import make_project, skip_unless, write_global

_SERVICES = ("engine", "project", "tool_runner")


@pytest.fixture
async def bus(config: Config) -> AsyncIterator[Bus]:
    """The engine, the project service and a tool runner in this process, and a bus to them."""
    stop = asyncio.Event()
    task = asyncio.create_task(serve_many(config, stop, _SERVICES))
    connection = await Bus.connect(config, "test-mode-env")
    try:
        await wait_for_services(config, _SERVICES, timeout=30)
        yield connection
    finally:
        await connection.close()
        stop.set()
        await asyncio.wait_for(task, 30)


async def _echo(bus: Bus, root: Path, request_id: str) -> ToolResult:
    (root / ".jido" / "settings.json").write_text(json.dumps({"permissions": {"allow": ["Bash"]}}))
    project_id = (await EngineClient(bus).start_project(str(root))).project_id
    meta = ToolCallMeta(request_id=request_id)
    return await ToolsClient(bus, project_id).run("bash", {"command": "echo hi"}, meta=meta, timeout=60)


@pytest.mark.parametrize("global_mode", ["auto", "bubblewrap"])
async def test_the_variable_runs_a_call_under_landlock_whatever_the_global_mode(
    global_mode: str, bus: Bus, config: Config, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    skip_unless("landlock")
    write_global(config.jido_home, {"mode": global_mode})
    monkeypatch.setenv(sandbox.MODE_ENV, "landlock")
    result = await _echo(bus, make_project(tmp_path / "proj"), f"forced-{global_mode}")
    assert result.ok, result
    assert result.data["output"] == "hi\n" and result.data["sandbox"] == "landlock", result


async def test_a_project_may_still_ask_for_a_stronger_sandbox_than_the_variable(
    bus: Bus, config: Config, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    skip_unless("bubblewrap")  # skips itself under the Landlock pass, as it must
    monkeypatch.setenv(sandbox.MODE_ENV, "landlock")
    root = make_project(tmp_path / "proj")
    result = await _echo(bus, root, "weaker-env")
    assert result.ok and result.data["sandbox"] == "landlock", result
    (root / ".jido" / "settings.json").write_text(
        json.dumps({"permissions": {"allow": ["Bash"]}, "sandbox": {"mode": "bubblewrap"}})
    )
    project_id = (await EngineClient(bus).start_project(str(root))).project_id
    meta = ToolCallMeta(request_id="stronger-project")
    stronger = await ToolsClient(bus, project_id).run("bash", {"command": "echo hi"}, meta=meta, timeout=60)
    assert stronger.ok and stronger.data["sandbox"] == "bubblewrap", stronger


@pytest.mark.parametrize("value", ["off", "Landlock", "none", "bwrap"])
async def test_a_value_the_variable_may_not_hold_refuses_the_call(
    value: str, bus: Bus, config: Config, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``off`` too: the variable never turns the sandbox off (a project's ``.envrc`` could set it)."""
    write_global(config.jido_home, {"mode": "auto"})
    monkeypatch.setenv(sandbox.MODE_ENV, value)
    root = make_project(tmp_path / "proj")
    (root / "out").mkdir()
    (root / ".jido" / "settings.json").write_text(json.dumps({"permissions": {"allow": ["Bash"]}}))
    project_id = (await EngineClient(bus).start_project(str(root))).project_id
    meta = ToolCallMeta(request_id=f"bad-{value}")
    result = await ToolsClient(bus, project_id).run(
        "bash", {"command": "echo ran > out/ran"}, meta=meta, timeout=60
    )
    assert not result.ok and result.error is not None, result
    assert result.error.type == "permission_denied", result
    assert f"JIDO_SANDBOX_MODE={value!r}" in result.error.message, result
    assert "auto, bubblewrap, landlock" in result.error.message, result
    assert not (root / "out" / "ran").exists()


def test_forced_mode_reads_the_variable() -> None:
    assert sandbox.forced_mode({}) is None
    assert sandbox.forced_mode({"JIDO_SANDBOX_MODE": ""}) is None
    assert sandbox.forced_mode({"JIDO_SANDBOX_MODE": " landlock "}) == "landlock"
    assert sandbox.forced_mode({"JIDO_SANDBOX_MODE": "auto"}) == "auto"
    with pytest.raises(PermissionDenied) as refused:
        sandbox.forced_mode({"JIDO_SANDBOX_MODE": "off"})
    assert refused.value.details == {"sandbox": "bad_mode_env", "env": "JIDO_SANDBOX_MODE", "value": "off"}


def test_doctor_says_the_variable_chose_landlock_and_how_to_get_bubblewrap_back(
    jido_home: Path, tmp_path: Path
) -> None:
    skip_unless("landlock")
    env = {**os.environ, "JIDO_CODE_HOME": str(jido_home), sandbox.MODE_ENV: "landlock"}
    done = subprocess.run(
        [
            str(Path(sys.executable).parent / "jidocode"),
            "doctor",
            "--json",
            "--no-check",
            "-p",
            str(tmp_path),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    report = json.loads(done.stdout)
    assert report["sandbox"] == "landlock", report
    assert "JIDO_SANDBOX_MODE is landlock" in report["reason"], report
    if sandbox.detect().bwrap:
        assert report["hint"] == "bubblewrap runs here: unset JIDO_SANDBOX_MODE", report
