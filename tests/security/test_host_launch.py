"""Host processes never import from a project (issue 24, finding 6; decision 0302).

A hostile repository carries a ``jidocode`` package of its own (``jidocode/__init__.py`` and
shadows of ``jidocode/services/...``) whose import writes a canary file outside the project with
the importing process's environment. Before the fix, a Python started by the runtime with the
project as its working directory and without ``-I`` imported it: the MCP stdio launcher (the
tool runner's environment, before the sandbox is entered) and every service ``jidocode up``
starts from its own working directory (a service's NATS password). Judged by the canary.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio

from jidocode.cli.up import Child, absolute_paths, service_env, spawn_service
from jidocode.shared import nats_permissions as perms
from jidocode.shared.config import Config
from jidocode.shared.natsserver import NatsServer, ensure_credentials, free_port
from jidocode.shared.runner import HOST_CWD, python_module_argv
from tests.helpers import wait_for_services
from tests.integration.tools.mcp_support import FLAKY, sandbox_readable, stdio, write_mcp_json
from tests.security.bus_system import SecureSystem, secure_system
from tests.security.sandbox_support import CANARY_SECRET, MODES, skip_unless, write_global

pytestmark = [pytest.mark.slow]

#: The variable the tests put in the runner's environment: a canary of its secrets.
SECRET_VAR = "JIDO_TEST_HOST_SECRET"

_PAYLOAD = """\
import json, os
with open({canary!r}, "a") as out:
    out.write(json.dumps({{"module": __name__, "env": dict(os.environ)}}) + "\\n")
"""


def hostile_project(root: Path, canary: Path) -> Path:
    """A repository whose ``jidocode`` package (and its shadows) write ``canary`` when imported."""
    payload = _PAYLOAD.format(canary=str(canary))
    for rel in (
        "jidocode/__init__.py",
        "jidocode/services/__init__.py",
        "jidocode/services/engine/__init__.py",
        "jidocode/services/engine/__main__.py",
        "jidocode/services/tool_runner/__init__.py",
        "jidocode/services/tool_runner/mcp/__init__.py",
        "jidocode/services/tool_runner/mcp/sandboxed.py",
        "jidocode/shared/__init__.py",
    ):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(payload)
    (root / "README.md").write_text("a project like any other\n")
    return root


def canary_text(canary: Path) -> str:
    return canary.read_text() if canary.exists() else ""


# --- the launch itself (pure) -------------------------------------------------------------------


def test_python_module_argv_is_isolated() -> None:
    argv = python_module_argv("jidocode.services.engine", "x")
    assert argv[1:] == ["-I", "-m", "jidocode.services.engine", "x"]
    assert HOST_CWD == "/"
    with pytest.raises(ValueError, match="not a module name"):
        python_module_argv("-c")


def test_up_makes_path_variables_absolute_for_its_children() -> None:
    env = absolute_paths(
        {"JIDO_DATA_HOME": "data", "JIDO_CODE_HOME": "/abs/home", "XDG_DATA_HOME": "~/x", "OTHER": "rel"},
        "/work/here",
    )
    assert env == {
        "JIDO_DATA_HOME": "/work/here/data",
        "JIDO_CODE_HOME": "/abs/home",
        "XDG_DATA_HOME": "~/x",
        "OTHER": "rel",
    }


# --- jidocode up: a service started from inside a hostile project --------------------------------


@pytest_asyncio.fixture
async def users_server(tmp_path: Path) -> AsyncIterator[tuple[str, dict[str, str], Path]]:
    """A nats-server with the embedded users, as ``jidocode up`` runs it."""
    data_home = tmp_path / "data"
    port = free_port()
    url = f"nats://127.0.0.1:{port}"
    passwords = ensure_credentials(url, data_home)
    server = await asyncio.to_thread(
        NatsServer(store_dir=tmp_path / "js", port=port, sync="default", users=passwords).start
    )
    try:
        yield url, passwords, data_home
    finally:
        await asyncio.to_thread(server.stop)


async def _serving_or_exited(proc: asyncio.subprocess.Process, config: Config) -> bool:
    """Whether the service answered ``$SRV.PING`` (``False``: its process ended first)."""
    ping = asyncio.ensure_future(wait_for_services(config, ("engine",), timeout=90))
    ended = asyncio.ensure_future(proc.wait())
    done, _ = await asyncio.wait({ping, ended}, timeout=100, return_when=asyncio.FIRST_COMPLETED)
    for task in (ping, ended):
        if task not in done:
            task.cancel()
    await asyncio.gather(ping, ended, return_exceptions=True)
    return ping in done and ping.exception() is None


@pytest.mark.asyncio
async def test_up_starts_a_service_from_inside_a_hostile_project_without_importing_it(
    tmp_path: Path, users_server: tuple[str, dict[str, str], Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    url, passwords, data_home = users_server
    canary = tmp_path / "canary.jsonl"
    root = hostile_project(tmp_path / "hostile", canary)
    monkeypatch.chdir(root)  # the user typed `jidocode up` in the project's directory
    base = {**os.environ, "NATS_URL": url, "JIDO_DATA_HOME": str(data_home)}
    base["JIDO_CODE_HOME"] = str(tmp_path / "jido_home")
    proc = await spawn_service(Child("engine"), service_env(base, "engine", passwords))
    drain = asyncio.ensure_future(proc.communicate())
    client = Config(
        nats_url=url,
        nats_user="client",
        nats_password=passwords["client"],
        nats_inbox_prefix=perms.inbox_prefix("client"),
        instance="tests",
    )
    try:
        served = await _serving_or_exited(proc, client)
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGTERM)
        output, _ = await asyncio.wait_for(drain, 60)
    found = canary_text(canary)
    assert passwords["engine"] not in found, "the project's code ran with the service's NATS password"
    assert found == "", f"the project's jidocode package was imported: {found[:300]}"
    assert served, f"the engine did not serve: {output.decode(errors='replace')[-2000:]}"


# --- the MCP stdio launcher ----------------------------------------------------------------------


@pytest_asyncio.fixture
async def system(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[SecureSystem]:
    """Engine, project and tool runner on a nats-server with users; the runner's environment holds
    a canary secret (as a service's holds its NATS password and provider keys)."""
    monkeypatch.setenv(SECRET_VAR, CANARY_SECRET)
    monkeypatch.setenv("JIDO_MCP_START_TIMEOUT_S", "90")  # a loaded machine starts Python slowly
    jido_home = tmp_path / "jido_home"
    jido_home.mkdir()
    async with secure_system(tmp_path, jido_home, ("engine", "project", "tool_runner")) as sys_:
        yield sys_


async def _echo(system: SecureSystem, pid: str, server: str, rid: str) -> str:
    """Call ``mcp__<server>__echo`` until its server has started (a start may outlast one call)."""

    async def loop() -> str:
        while True:
            result = await system.run(pid, f"mcp__{server}__echo", {"text": "hi"}, request_id=rid, timeout=60)
            if result.ok:
                return str(result.data["text"])
            if result.error is None or result.error.details.get("reason") != "starting":
                raise AssertionError(f"the MCP call failed: {result.error}")

    return await asyncio.wait_for(loop(), 180)


@pytest.mark.asyncio
@pytest.mark.parametrize("mode", MODES)
async def test_the_users_own_mcp_server_launched_for_a_hostile_project_imports_nothing_of_it(
    tmp_path: Path, system: SecureSystem, mode: str
) -> None:
    """An untrusted repository, opened with the user's global stdio server: the launcher (a host
    process with the runner's environment) used to start in the project and import its package."""
    skip_unless(mode)
    canary = tmp_path / "canary.jsonl"
    root = hostile_project(tmp_path / "hostile", canary)
    write_global(
        system.jido_home,
        {"mode": mode},
        permissions={"allow": ["mcp__flaky"], "additional_directories": sandbox_readable()},
    )
    write_mcp_json(system.jido_home, {"flaky": stdio(FLAKY)})
    pid = await system.start_project(root)
    try:
        text = await _echo(system, pid, "flaky", f"launch-{mode}")
    finally:
        found = canary_text(canary)
        assert CANARY_SECRET not in found, "the project's code ran with the tool runner's secrets"
        assert found == "", f"the project's jidocode package was imported: {found[:300]}"
    assert text == "hi"


@pytest.mark.asyncio
async def test_a_trusted_projects_own_stdio_server_launch_imports_nothing_of_it(
    tmp_path: Path, system: SecureSystem
) -> None:
    """Trusting a project lets its ``.mcp.json`` name a server, never run code on the host."""
    from jidocode.shared.trust import trust_project

    mode = next((m for m in MODES if _available(m)), None)
    if mode is None:
        pytest.skip("no OS sandbox works here")
    canary = tmp_path / "canary.jsonl"
    root = hostile_project(tmp_path / "hostile", canary)
    write_global(system.jido_home, {"mode": mode}, permissions={"additional_directories": sandbox_readable()})
    write_mcp_json(root, {"mine": stdio(FLAKY)})
    (root / ".jido").mkdir()
    (root / ".jido" / "settings.json").write_text(json.dumps({"permissions": {"allow": ["mcp__mine"]}}))
    trust_project(root, home=system.jido_home)
    pid = await system.start_project(root)
    try:
        text = await _echo(system, pid, "mine", "launch-trusted")
    finally:
        found = canary_text(canary)
        assert CANARY_SECRET not in found, "the project's code ran with the tool runner's secrets"
        assert found == "", f"the project's jidocode package was imported: {found[:300]}"
    assert text == "hi"


def _available(mode: str) -> bool:
    try:
        skip_unless(mode)
    except pytest.skip.Exception:
        return False
    return True
