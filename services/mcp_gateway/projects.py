"""Every project's MCP server behind one route, for the HTTP gateway: ``/projects/{project_id}/mcp``.

::

    projects = McpProjects(bus, allowed_hosts=["127.0.0.1:8765"], allowed_origins=["http://127.0.0.1:8765"])
    routes = [Route("/projects/{project_id}/mcp", projects, methods=["GET", "POST", "DELETE"])]
    async with projects:          # around serving: runs each server's session manager
        await uvicorn_server.serve()

A project's server is built (:func:`~.server.build_server`) on the first request that names
it, once the project service knows the project, and kept until :meth:`McpProjects.close`:
each runs the SDK's streamable-HTTP session manager in a task of its own. An id that is not
a project is 404, one more project than ``max_projects`` is 503; both with a JSON body
``{"error": {"type", "message"}}``. Authentication is the host's (the gateway's bearer token);
the ``Host`` and ``Origin`` a request may show are always checked (the SDK's DNS-rebinding
protection, on with ``allowed_hosts``/``allowed_origins``: the gateway passes its own, and
checks them itself first to answer 403 in its error format, decision 0305).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from types import TracebackType
from typing import Any, Final

from mcp.server.lowlevel import Server
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings
from starlette.responses import JSONResponse
from starlette.types import Receive, Scope, Send

from jidocode.shared.bus import Bus
from jidocode.shared.clients import ProjectClient
from jidocode.shared.errors import JidoError, NotFound
from jidocode.shared.subjects import validate_token

from .server import DEFAULT_CALL_TIMEOUT_S, build_server

__all__ = ["MAX_PROJECTS", "McpProjects"]

#: Projects one :class:`McpProjects` serves at once (each holds a session manager).
MAX_PROJECTS: Final = 256


class _Refused(Exception):
    def __init__(self, status: int, error_type: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.error_type = error_type
        self.message = message


class _Served:
    """One project's server and the task running its session manager."""

    def __init__(self, server: Server[Any], manager: StreamableHTTPSessionManager) -> None:
        self.server = server
        self.manager = manager
        self.stop = asyncio.Event()
        self.task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        started = asyncio.Event()

        async def run() -> None:
            async with self.manager.run():  # its task group lives and ends in this task
                started.set()
                await self.stop.wait()

        self.task = asyncio.ensure_future(run())
        waiter = asyncio.ensure_future(started.wait())
        await asyncio.wait({self.task, waiter}, return_when=asyncio.FIRST_COMPLETED)
        waiter.cancel()
        if self.task.done():
            self.task.result()  # it failed to start: raise why

    async def close(self) -> None:
        self.stop.set()
        if self.task is not None:
            await self.task


class McpProjects:
    """An ASGI app serving the MCP server of the project its route's ``project_id`` names."""

    def __init__(
        self,
        bus: Bus,
        *,
        call_timeout_s: float = DEFAULT_CALL_TIMEOUT_S,
        max_projects: int = MAX_PROJECTS,
        allowed_hosts: Sequence[str],
        allowed_origins: Sequence[str] = (),
    ) -> None:
        """``allowed_hosts``: the ``Host`` values that name the host (``127.0.0.1:*`` for any
        port); ``allowed_origins``: the ``Origin`` values accepted when a request has one."""
        if max_projects < 1:
            raise ValueError(f"max_projects must be at least 1, got {max_projects}")
        if not allowed_hosts:
            raise ValueError("allowed_hosts must name at least one Host value (DNS-rebinding protection)")
        self.bus = bus
        self.call_timeout_s = call_timeout_s
        self.max_projects = max_projects
        self.security = TransportSecuritySettings(
            enable_dns_rebinding_protection=True,
            allowed_hosts=list(allowed_hosts),
            allowed_origins=list(allowed_origins),
        )
        self._served: dict[str, _Served] = {}
        self._lock = asyncio.Lock()
        self._open = False

    async def __aenter__(self) -> McpProjects:
        self._open = True
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    @property
    def projects(self) -> list[str]:
        """The projects served now."""
        return list(self._served)

    async def close(self) -> None:
        """Stop every project's session manager (their servers' approvals conversations are let go)."""
        self._open = False
        served, self._served = list(self._served.values()), {}
        for one in served:
            await one.close()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            served = await self._get(str(scope.get("path_params", {}).get("project_id", "")))
        except _Refused as refused:
            body = {"error": {"type": refused.error_type, "message": refused.message}}
            await JSONResponse(body, status_code=refused.status)(scope, receive, send)
            return
        await served.manager.handle_request(scope, receive, send)

    async def _get(self, project_id: str) -> _Served:
        served = self._served.get(project_id)
        if served is not None:
            return served
        async with self._lock:
            served = self._served.get(project_id)
            if served is not None:
                return served
            if not self._open:
                raise _Refused(
                    503, "service_unavailable", "the MCP endpoints are not started (async with McpProjects)"
                )
            try:
                validate_token(project_id, "project id")
            except ValueError as exc:
                raise _Refused(404, "not_found", str(exc)) from None
            try:
                await ProjectClient(self.bus, project_id, timeout=15.0).info()
            except NotFound:
                raise _Refused(404, "not_found", f"no project {project_id!r}") from None
            except JidoError as exc:
                raise _Refused(503, exc.type, exc.message) from None
            if len(self._served) >= self.max_projects:
                raise _Refused(
                    503,
                    "quota_exceeded",
                    f"this gateway serves MCP for {len(self._served)} projects already (at most {self.max_projects})",
                )
            server = build_server(self.bus, project_id, call_timeout_s=self.call_timeout_s)
            server.streamable_http_app(transport_security=self.security)  # makes its session manager
            served = _Served(server, server.session_manager)
            await served.start()
            self._served[project_id] = served
            return served
