"""MCP servers a project names stay under the network rule (issue 24, finding 8; decision 0302).

An HTTP server of a project's ``.mcp.json`` (which a model can plant) made the tool runner itself
request a model-chosen URL from the host: egress around the sandbox's "no network". It is now
requested only once the user approved it (``jidocode mcp-servers approve <dir> <server>``) for
that exact URL. Judged by a counting proxy in front of a real MCP HTTP server: no connection
arrives before the approval. A stdio server a project names runs in the sandbox, whose network
rule holds: a listener on the host counts no connection from it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import stat
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio

from jidocode.shared.clients import ToolsClient
from jidocode.shared.events.tools import ToolResult
from jidocode.shared.natsserver import free_port
from jidocode.shared.trust import trust_project
from tests.integration.tools.mcp_support import FLAKY, sandbox_readable, stdio, write_mcp_json
from tests.security.bus_system import SecureSystem, secure_system
from tests.security.sandbox_support import MODES, skip_unless, write_global

pytestmark = [pytest.mark.slow, pytest.mark.asyncio]

PROBE = str(Path(__file__).with_name("mcp_probe_server.py"))


class Counter:
    """A TCP listener on 127.0.0.1 that counts connections, forwarding each to ``backend`` (a
    port) when given, else closing it."""

    def __init__(self, backend: int | None = None) -> None:
        self.backend = backend
        self.connections = 0
        self.port = 0
        self._server: asyncio.Server | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/mcp"

    async def __aenter__(self) -> Counter:
        self._server = await asyncio.start_server(self._on, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self._server.wait_closed(), 10)

    async def _on(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        if self.backend is None:
            writer.close()
            return
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.backend)
        except OSError:
            writer.close()
            return
        await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer), return_exceptions=True)


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    finally:
        writer.close()


async def _listening(port: int, timeout: float = 60.0) -> None:
    """Wait until something accepts connections on ``port``."""

    async def loop() -> None:
        while True:
            try:
                _, writer = await asyncio.open_connection("127.0.0.1", port)
            except OSError:
                await asyncio.sleep(0.1)  # polling a port that is not open yet: no event to wait on
                continue
            writer.close()
            await writer.wait_closed()
            return

    await asyncio.wait_for(loop(), timeout)


@pytest_asyncio.fixture
async def mcp_http() -> AsyncIterator[int]:
    """The tests' MCP server over streamable HTTP (a real one, started outside any sandbox)."""
    port = free_port()
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        FLAKY,
        "--http",
        str(port),
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
    )
    try:
        await _listening(port)
        yield port
    finally:
        proc.kill()
        await proc.wait()


@pytest_asyncio.fixture
async def system(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[SecureSystem]:
    monkeypatch.setenv("JIDO_MCP_START_TIMEOUT_S", "90")  # a loaded machine starts Python slowly
    jido_home = tmp_path / "jido_home"
    jido_home.mkdir()
    async with secure_system(tmp_path, jido_home, ("engine", "project", "tool_runner")) as sys_:
        yield sys_


async def jidocode(system: SecureSystem, *argv: str) -> tuple[int, str, str]:
    """The ``jidocode`` CLI with the system's global home."""
    env = {**os.environ, "JIDO_CODE_HOME": str(system.jido_home)}
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        "from jidocode.cli.main import app; app()",
        *argv,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 120)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


async def trusted_project(system: SecureSystem, root: Path, servers: dict[str, object]) -> str:
    """A trusted project whose ``.mcp.json`` names ``servers`` and whose settings allow them all."""
    write_mcp_json(root, servers)
    (root / ".jido").mkdir(exist_ok=True)
    allow = [f"mcp__{name}" for name in servers]
    (root / ".jido" / "settings.json").write_text(json.dumps({"permissions": {"allow": allow}}))
    trust_project(root, home=system.jido_home)
    return await system.start_project(root)


async def echo(system: SecureSystem, pid: str, server: str, rid: str) -> ToolResult:
    return await system.run(pid, f"mcp__{server}__echo", {"text": "hi"}, request_id=rid, timeout=60)


async def states(system: SecureSystem, pid: str) -> dict[str, tuple[str, str]]:
    found = (await ToolsClient(system.client, pid).mcp_servers(timeout=60)).servers
    return {s.name: (s.state, s.error) for s in found}


def refused_for_approval(result: ToolResult, url: str) -> None:
    assert not result.ok and result.error is not None, result
    assert result.error.details.get("reason") == "awaiting_approval", result.error
    assert url in result.error.message and "jidocode mcp-servers approve" in result.error.message


# --- HTTP servers ---------------------------------------------------------------------------------


async def test_a_project_http_server_is_never_requested_before_approval(
    tmp_path: Path, system: SecureSystem, mcp_http: int
) -> None:
    async with Counter(mcp_http) as counter:
        pid = await trusted_project(system, tmp_path / "proj", {"docs": {"type": "http", "url": counter.url}})
        listed = await ToolsClient(system.client, pid).mcp_tools(include_hidden=True, timeout=60)
        refused_for_approval(await echo(system, pid, "docs", "before-1"), counter.url)
        state, error = (await states(system, pid))["docs"]
        assert counter.connections == 0, "the tool runner requested a URL the user never approved"
        assert not [t for t in listed.tools if t.name.startswith("mcp__docs__")]
        assert state == "awaiting_approval" and counter.url in error


async def test_an_approved_project_http_server_works_and_the_approval_stays_out_of_the_project(
    tmp_path: Path, system: SecureSystem, mcp_http: int
) -> None:
    root = tmp_path / "proj"
    async with Counter(mcp_http) as counter:
        pid = await trusted_project(system, root, {"docs": {"type": "http", "url": counter.url}})
        refused_for_approval(await echo(system, pid, "docs", "approve-1"), counter.url)
        code, out, err = await jidocode(system, "mcp-servers", "approve", str(root), "docs", "--json")
        assert code == 0, err
        assert json.loads(out)["url"] == counter.url
        result = await echo(system, pid, "docs", "approve-2")
        assert result.ok and result.data["text"] == "hi", result
        assert counter.connections > 0
    store = system.jido_home / "mcp_approvals.json"
    assert stat.S_IMODE(store.stat().st_mode) == 0o600
    assert counter.url in store.read_text()
    assert not [p for p in root.rglob("*") if counter.url.encode() in _bytes(p) and p.name != ".mcp.json"]


async def test_a_changed_url_awaits_a_new_approval(
    tmp_path: Path, system: SecureSystem, mcp_http: int
) -> None:
    root = tmp_path / "proj"
    async with Counter(mcp_http) as first, Counter(mcp_http) as second:
        pid = await trusted_project(system, root, {"docs": {"type": "http", "url": first.url}})
        code, _, err = await jidocode(system, "mcp-servers", "approve", str(root), "docs")
        assert code == 0, err
        assert (await echo(system, pid, "docs", "changed-1")).ok
        write_mcp_json(root, {"docs": {"type": "http", "url": second.url}})  # what a model could do
        refused_for_approval(await echo(system, pid, "docs", "changed-2"), second.url)
        assert (await states(system, pid))["docs"][0] == "awaiting_approval"
        assert second.connections == 0, "a changed URL was requested under the old approval"


async def test_a_project_server_replacing_a_global_one_of_the_same_name_awaits_approval(
    tmp_path: Path, system: SecureSystem, mcp_http: int
) -> None:
    async with Counter(mcp_http) as users, Counter(mcp_http) as planted:
        write_mcp_json(system.jido_home, {"docs": {"type": "http", "url": users.url}})
        pid = await trusted_project(system, tmp_path / "proj", {"docs": {"type": "http", "url": planted.url}})
        refused_for_approval(await echo(system, pid, "docs", "replace-1"), planted.url)
        assert planted.connections == 0


async def test_the_users_global_http_server_needs_no_approval(
    tmp_path: Path, system: SecureSystem, mcp_http: int
) -> None:
    async with Counter(mcp_http) as counter:
        write_mcp_json(system.jido_home, {"docs": {"type": "http", "url": counter.url}})
        write_global(system.jido_home, {}, permissions={"allow": ["mcp__docs"]})
        root = tmp_path / "proj"
        root.mkdir()
        pid = await system.start_project(root)
        result = await echo(system, pid, "docs", "global-1")
        assert result.ok and result.data["text"] == "hi", result
        assert counter.connections > 0


async def test_the_cli_lists_what_awaits_approval_and_revokes(tmp_path: Path, system: SecureSystem) -> None:
    root = tmp_path / "proj"
    write_mcp_json(
        root,
        {"docs": {"type": "http", "url": "http://127.0.0.1:9/mcp"}, "tool": stdio("-c", "pass")},
    )
    trust_project(root, home=system.jido_home)
    code, out, err = await jidocode(system, "mcp-servers", "list", str(root), "--json")
    assert code == 0, err
    rows = {r["name"]: r for r in json.loads(out)}
    assert rows["docs"]["state"] == "awaiting_approval" and rows["docs"]["target"] == "http://127.0.0.1:9/mcp"
    assert rows["tool"]["state"] == "runs" and rows["tool"]["transport"] == "stdio"
    code, _, err = await jidocode(system, "mcp-servers", "approve", str(root), "tool")
    assert code == 2 and "stdio server" in err
    code, _, err = await jidocode(system, "mcp-servers", "approve", str(root), "nope")
    assert code == 2 and "names no server 'nope'" in err
    assert (await jidocode(system, "mcp-servers", "approve", str(root), "docs"))[0] == 0
    code, out, _ = await jidocode(system, "mcp-servers", "list", str(root), "--json")
    assert {r["name"]: r["state"] for r in json.loads(out)}["docs"] == "approved"
    assert (await jidocode(system, "mcp-servers", "revoke", str(root), "docs"))[0] == 0
    code, out, _ = await jidocode(system, "mcp-servers", "list", str(root), "--json")
    assert {r["name"]: r["state"] for r in json.loads(out)}["docs"] == "awaiting_approval"


def _bytes(path: Path) -> bytes:
    try:
        return path.read_bytes() if path.is_file() and not path.is_symlink() else b""
    except OSError:
        return b""


# --- stdio servers --------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
async def test_a_project_stdio_server_cannot_reach_the_hosts_network(
    tmp_path: Path, system: SecureSystem, mode: str
) -> None:
    """Even with the project's settings asking for the network (only the user's global settings
    can give it): a listener on the host's loopback counts no connection from the server."""
    skip_unless(mode)
    readable = sorted({*sandbox_readable(), str(Path(PROBE).parent)})
    write_global(system.jido_home, {"mode": mode}, permissions={"additional_directories": readable})
    root = tmp_path / "proj"
    async with Counter() as listener:
        pid = await trusted_project(system, root, {"probe": stdio(PROBE)})
        (root / ".jido" / "settings.json").write_text(
            json.dumps({"permissions": {"allow": ["mcp__probe"]}, "sandbox": {"network": True}})
        )

        async def call() -> ToolResult:
            while True:
                result = await system.run(
                    pid, "mcp__probe__connect", {"port": listener.port}, request_id=f"net-{mode}", timeout=60
                )
                if result.ok or result.error is None or result.error.details.get("reason") != "starting":
                    return result

        result = await asyncio.wait_for(call(), 180)
        assert result.ok, result
        assert str(result.data["text"]).startswith("refused"), result.data
        assert listener.connections == 0, "a project's MCP server reached the host's network"


async def test_doctor_names_a_project_http_server_awaiting_approval(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``jidocode doctor -p <dir>`` warns with the URL (never fails the run for it)."""
    from typer.testing import CliRunner

    from jidocode.cli.main import app

    home = tmp_path / "jido_home"
    monkeypatch.delenv("NATS_URL", raising=False)
    monkeypatch.setenv("JIDO_CODE_HOME", str(home))
    monkeypatch.setenv("JIDO_DATA_HOME", str(tmp_path / "data"))
    root = tmp_path / "proj"
    write_mcp_json(root, {"docs": {"type": "http", "url": "http://127.0.0.1:9/planted"}})
    trust_project(root, home=home)
    result = CliRunner().invoke(app, ["doctor", "--json", "--no-check", "--project", str(root)])
    check = json.loads(result.output)["mcp_check"]
    assert check["status"] == "warn" and check["lines"] == ["docs: http://127.0.0.1:9/planted"], check
    assert "jidocode mcp-servers approve" in check["fix"]
    result = CliRunner().invoke(app, ["doctor", "--no-check", "--project", str(root)])
    assert "mcp:       warn" in result.output and "http://127.0.0.1:9/planted" in result.output, result.output
    assert "mcp" not in result.output.partition("needed and missing:")[2]
