"""The MCP servers of every project this replica has used: configuration, connections, calls.

:class:`McpHost` is the tool runner's ``MCPClientManager`` (seed 003). Per project it reads
``.mcp.json`` (:mod:`.config`; the project layer only when the user trusts the project) and
keeps one :class:`.connection.ServerConnection` per server, created on first use. An HTTP
server of the project layer is left out until the user approved its URL (:mod:`.approvals`;
listed as ``awaiting_approval``, never requested). It re-reads the configuration when a
``.mcp.json``, the trust store or the approval store changes (a changed or removed server's
connection is closed), and closes a project's connections when the project stops. Each replica
of the tool runner has its own host, hence its own connections. An HTTP server configured
without an ``Authorization`` header uses the user's OAuth login for it, stored in the data home
(:mod:`.oauth`).
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from jidocode.services.tool_runner.executor import MAX_RESULT_BYTES
from jidocode.shared.config import default_data_home
from jidocode.shared.errors import JidoError, NotFound
from jidocode.shared.events.tools import ToolResult, ToolSpec
from jidocode.shared.policy import Policy
from jidocode.shared.settings import global_home
from jidocode.shared.trust import is_trusted, trust_store_path

from .approvals import approval_store_path, awaiting_message, is_approved
from .config import HttpServer, McpConfig, load_config, withhold_unapproved
from .connection import McpServerError, ServerConnection, State
from .elicit import Asker
from .mapping import fit, mcp_name, split_name, tool_result, tool_spec
from .oauth import TokenFile, login_path
from .rules import mcp_exposed
from .sandboxed import LaunchSpec

__all__ = [
    "DEFAULT_START_TIMEOUT_S",
    "LIST_WAIT_MAX_S",
    "START_TIMEOUT_ENV",
    "START_TIMEOUT_RANGE",
    "McpHost",
    "ServerStatus",
    "start_timeout_from_env",
]

log = logging.getLogger("jidocode.tool_runner.mcp")

#: How long a server gets to start and list its tools (``JIDO_MCP_START_TIMEOUT_S``).
DEFAULT_START_TIMEOUT_S: Final = 20.0
START_TIMEOUT_ENV: Final = "JIDO_MCP_START_TIMEOUT_S"
#: Catalogue listings wait for a server's first start only this long after it began (the
#: project service waits 25 s for a listing; a conversation retries its own for 20 s): a server
#: that hangs at start holds up the listings of its first 10 s, never more.
LIST_WAIT_MAX_S: Final = 10.0
#: The bounds of ``JIDO_MCP_START_TIMEOUT_S``.
START_TIMEOUT_RANGE: Final = (0.5, 300.0)


def start_timeout_from_env(env: Mapping[str, str]) -> float:
    """``JIDO_MCP_START_TIMEOUT_S`` (default 20); ``ValueError`` naming it when not a number in range."""
    raw = env.get(START_TIMEOUT_ENV)
    if raw is None or raw == "":
        return DEFAULT_START_TIMEOUT_S
    try:
        value = float(raw)
    except ValueError:
        raise ValueError(f"{START_TIMEOUT_ENV}={raw!r} is not a number of seconds") from None
    low, high = START_TIMEOUT_RANGE
    if not low <= value <= high:
        raise ValueError(f"{START_TIMEOUT_ENV}={raw!r} is out of range ({low:g} … {high:g} s)")
    return value


@dataclass(frozen=True)
class ServerStatus:
    """One configured server as this replica sees it (for ``discover``)."""

    name: str
    layer: str
    transport: str
    state: str
    tools: list[str]
    error: str = ""


@dataclass
class _ProjectServers:
    signature: tuple[Any, ...]
    config: McpConfig
    connections: dict[str, ServerConnection] = field(default_factory=dict)


def _stat(path: Path) -> tuple[float, int] | None:
    try:
        st = path.stat()
    except OSError:
        return None
    return (st.st_mtime, st.st_size)


class McpHost:
    """Every MCP connection of this replica, by project."""

    def __init__(
        self, *, jido_home: Path | None, start_timeout_s: float | None = None, data_home: Path | None = None
    ) -> None:
        if start_timeout_s is None:
            start_timeout_s = start_timeout_from_env(os.environ)
        if start_timeout_s <= 0:
            raise ValueError("start_timeout_s must be positive")
        self.home = global_home(jido_home)
        #: Where the users' OAuth logins of HTTP servers are (``$JIDO_DATA_HOME`` by default).
        self.data_home = data_home or default_data_home()
        self.start_timeout_s = start_timeout_s
        self._projects: dict[str, _ProjectServers] = {}
        self._lock = asyncio.Lock()

    # --- configuration -----------------------------------------------------------------------

    def _signature(self, root: str) -> tuple[Any, ...]:
        return (
            _stat(self.home / ".mcp.json"),
            _stat(Path(root) / ".mcp.json"),
            _stat(trust_store_path(self.home)),
            _stat(approval_store_path(self.home)),
        )

    def _load(self, root: str) -> McpConfig:
        """The project's servers, without the project's HTTP servers the user has not approved."""
        trusted = is_trusted(root, home=self.home)
        config = load_config(Path(root), global_home=self.home, trusted=trusted)
        return withhold_unapproved(config, lambda name, url: is_approved(root, name, url, home=self.home))

    async def _servers(self, project_id: str, policy: Policy) -> _ProjectServers:
        root = policy.sandbox.root
        sig = await asyncio.to_thread(self._signature, root)
        current = self._projects.get(project_id)
        if current is not None and current.signature == sig:
            return current
        async with self._lock:
            current = self._projects.get(project_id)
            if current is not None and current.signature == sig:
                return current
            config = await asyncio.to_thread(self._load, root)
            for problem in config.problems:
                log.warning("MCP configuration of %s: %s", project_id, problem)
            fresh = _ProjectServers(signature=sig, config=config)
            if current is not None:  # keep what did not change, close the rest
                for name, conn in current.connections.items():
                    if config.servers.get(name) == conn.config:
                        fresh.connections[name] = conn
                    else:
                        await conn.close()
            self._projects[project_id] = fresh
            return fresh

    def _connection(self, servers: _ProjectServers, name: str, policy: Policy) -> ServerConnection:
        conn = servers.connections.get(name)
        if conn is None:
            box = policy.sandbox
            where = LaunchSpec(
                command="-",
                root=box.root,
                data_dir=box.data_dir,
                jido_home=box.jido_home,
                additional_directories=list(box.additional_directories),
            )
            config = servers.config.servers[name]
            conn = ServerConnection(
                name,
                config,
                where=where,
                start_timeout_s=self.start_timeout_s,
                login=self._login(name, config, box.root),
            )
            servers.connections[name] = conn
        return conn

    def _login(self, name: str, config: HttpServer | Any, root: str) -> TokenFile | None:
        """The stored OAuth login of an HTTP server without a configured ``Authorization`` header
        (none, with a warning, when the data home lies inside the project)."""
        if not isinstance(config, HttpServer) or any(k.lower() == "authorization" for k in config.headers):
            return None
        try:
            return TokenFile(login_path(self.data_home, name, config.url, project_root=root), config.url)
        except JidoError as exc:
            log.warning("MCP server %s: no OAuth: %s", name, exc.message)
            return None

    # --- the catalogue -----------------------------------------------------------------------

    async def specs(
        self, project_id: str, policy: Policy, *, wait_s: float, include_hidden: bool = False
    ) -> list[ToolSpec]:
        """The tools of every server of the project, started as needed. A server that fails, or is
        not ready within ``wait_s`` (it goes on starting), is left out of this listing."""
        servers = await self._servers(project_id, policy)
        names = sorted(servers.config.servers)
        conns = [self._connection(servers, n, policy) for n in names]
        wait = min(wait_s, self.start_timeout_s)
        results = await asyncio.gather(*(self._listed(c, wait) for c in conns), return_exceptions=True)
        out: list[ToolSpec] = []
        for conn, res in zip(conns, results, strict=True):
            if isinstance(res, BaseException):
                if not isinstance(res, McpServerError | TimeoutError):
                    log.warning("MCP server %s of %s: %r", conn.name, project_id, res)
                continue
            for tool in conn.tools:
                spec = tool_spec(conn.name, tool)
                if spec is not None and (include_hidden or mcp_exposed(policy, spec.name)):
                    out.append(spec)
        return out

    @staticmethod
    async def _listed(conn: ServerConnection, wait_s: float) -> None:
        """Ready ``conn`` for a listing: wait for its first start; one that failed before is only
        restarted in the background (a server that keeps failing never slows a listing down)."""
        if conn.state is State.READY:
            return
        if conn.starts == 0:
            await conn.ensure(min(wait_s, LIST_WAIT_MAX_S))
            return
        if conn.starts == 1 and conn.state is State.STARTING:
            left = LIST_WAIT_MAX_S - conn.starting_for()
            if left > 0:
                await conn.ensure(min(wait_s, left))
                return
            raise McpServerError(f"MCP server {conn.name!r} is still starting")
        conn.poke()
        raise McpServerError(f"MCP server {conn.name!r} is not ready ({conn.last_error or conn.state.value})")

    async def status(self, project_id: str, policy: Policy) -> tuple[list[ServerStatus], list[str]]:
        """Every configured server of the project and its state here (starts none), and the
        problems of its ``.mcp.json`` files."""
        servers = await self._servers(project_id, policy)
        out = []
        for name, cfg in sorted(servers.config.servers.items()):
            conn = servers.connections.get(name)
            out.append(
                ServerStatus(
                    name=name,
                    layer=servers.config.layer.get(name, ""),
                    transport="http" if isinstance(cfg, HttpServer) else "stdio",
                    state=conn.state.value if conn else State.IDLE.value,
                    tools=[mcp_name(name, t.name) for t in conn.tools] if conn else [],
                    error=conn.last_error if conn else "",
                )
            )
        for name, url in sorted(servers.config.awaiting_approval.items()):
            out.append(
                ServerStatus(
                    name=name,
                    layer="project",
                    transport="http",
                    state="awaiting_approval",
                    tools=[],
                    error=awaiting_message(policy.sandbox.root, name, url),
                )
            )
        for name in servers.config.untrusted:
            out.append(
                ServerStatus(
                    name=name,
                    layer="project",
                    transport="",
                    state="untrusted",
                    tools=[],
                    error="the project is not trusted: its .mcp.json servers are not started",
                )
            )
        return out, [str(p) for p in servers.config.problems]

    # --- calls -------------------------------------------------------------------------------

    async def spec(self, project_id: str, policy: Policy, name: str, timeout_s: float) -> ToolSpec:
        """The spec of MCP tool ``name``, starting its server if needed; :class:`NotFound` naming why not."""
        parts = split_name(name)
        if parts is None:
            raise NotFound(
                f"{name!r} is not an MCP tool name (mcp__<server>__<tool>)", details={"tool": name}
            )
        server, tool = parts
        servers = await self._servers(project_id, policy)
        if server not in servers.config.servers:
            raise self._absent(servers.config, policy, name, server)
        conn = self._connection(servers, server, policy)
        await conn.ensure(min(timeout_s, self.start_timeout_s))
        for t in conn.tools:
            if t.name == tool:
                spec = tool_spec(server, t)
                if spec is not None:
                    return spec
        raise NotFound(
            f"MCP server {server!r} has no tool {tool!r} (it has: {', '.join(t.name for t in conn.tools) or 'none'})",
            details={"tool": name, "server": server, "reason": "no_such_tool"},
        )

    async def call(
        self,
        project_id: str,
        policy: Policy,
        name: str,
        args: dict[str, Any],
        timeout_s: float,
        *,
        max_bytes: int = MAX_RESULT_BYTES,
        ask: Asker | None = None,
    ) -> ToolResult:
        """Run an authorized call of MCP tool ``name`` within ``timeout_s``; its result is cut to
        ``max_bytes`` of JSON. A question its server asks meanwhile goes to ``ask`` (the call's
        approval flow; without one it is answered ``cancel``)."""
        parts = split_name(name)
        if parts is None:
            raise NotFound(f"{name!r} is not an MCP tool name", details={"tool": name})
        server, tool = parts
        servers = await self._servers(project_id, policy)
        if server not in servers.config.servers:
            raise self._absent(servers.config, policy, name, server)
        conn = self._connection(servers, server, policy)
        return fit(tool_result(server, tool, await conn.call(tool, args, timeout_s, ask=ask)), max_bytes)

    @staticmethod
    def _absent(config: McpConfig, policy: Policy, name: str, server: str) -> NotFound:
        """Why tool ``name`` has no running server: awaiting approval, untrusted or not configured."""
        url = config.awaiting_approval.get(server)
        if url is not None:
            return NotFound(
                f"tool {name!r}: {awaiting_message(policy.sandbox.root, server, url)}",
                details={"tool": name, "server": server, "reason": "awaiting_approval", "url": url},
            )
        why = (
            "its project is not trusted, so the servers of its .mcp.json are not started"
            if server in config.untrusted
            else f"configured servers: {', '.join(sorted(config.servers)) or 'none'}"
        )
        return NotFound(
            f"tool {name!r}: no MCP server {server!r} ({why})",
            details={"tool": name, "server": server, "reason": "no_such_server"},
        )

    # --- lifecycle ---------------------------------------------------------------------------

    async def stop_project(self, project_id: str) -> None:
        """Close the project's connections (its servers stop); a later use starts them again."""
        servers = self._projects.get(project_id)
        if servers is not None:  # listed (as closed) until every server has ended
            await asyncio.gather(*(c.close() for c in servers.connections.values()))
            if self._projects.get(project_id) is servers:
                del self._projects[project_id]

    async def close(self) -> None:
        for project_id in list(self._projects):
            await self.stop_project(project_id)

    def running(self, project_id: str) -> dict[str, str]:
        """Each connection's state (tests, diagnostics)."""
        servers = self._projects.get(project_id)
        return {} if servers is None else {n: c.state.value for n, c in servers.connections.items()}
