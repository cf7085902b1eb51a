"""The gateway service: the HTTP face of JidoCode (JSON API, SSE, console, A2A).

An ASGI app (:mod:`.app`) served by uvicorn on ``JIDO_GATEWAY_HOST``:``JIDO_GATEWAY_PORT``
(default ``127.0.0.1:8765``). It talks to the services only through the typed
clients over its own NATS connection (user ``gateway``) and keeps no state, so
several replicas can run behind a load balancer.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket

import uvicorn
from starlette.applications import Starlette

from jidocode.shared.bus import Bus
from jidocode.shared.config import Config
from jidocode.shared.service import ServiceLifecycle

from .app import create_app
from .auth import TokenChecker, load_or_create_token
from .context import GatewayContext
from .settings import GatewaySettings

__all__ = ["GatewayServer", "listen", "serve"]

log = logging.getLogger("jidocode.gateway")


def listen(host: str, port: int) -> socket.socket:
    """A socket listening on ``host``:``port`` (``0``: a free port), or ``OSError`` naming both.

    The gateway binds before it builds its app: the app's same-origin and MCP ``Host`` checks
    need the real port (:func:`.app.create_app`).
    """
    try:
        infos = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
        families = [info[0] for info in infos]
        # a name such as localhost: IPv4 first (the URL `jidocode up` prints is 127.0.0.1)
        family = socket.AF_INET if socket.AF_INET in families else families[0]
        return socket.create_server((host, port), family=family, backlog=2048)
    except OSError as exc:
        why = os.strerror(exc.errno) if exc.errno and exc.errno > 0 else (exc.strerror or str(exc))
        raise OSError(exc.errno, f"the gateway cannot listen on {host}:{port}: {why}") from exc


class GatewayServer:
    """uvicorn serving the app over a connected bus; the app is built once the port is bound."""

    def __init__(self, ctx: GatewayContext) -> None:
        self.ctx = ctx
        self._socket: socket.socket | None = None
        self._port: int | None = None
        self._app: Starlette | None = None
        self._server: uvicorn.Server | None = None
        self._task: asyncio.Task[None] | None = None

    @property
    def app(self) -> Starlette:
        """The ASGI app (it exists once :meth:`start` bound the port)."""
        if self._app is None:
            raise RuntimeError("the gateway's app is built when it starts (GatewayServer.start)")
        return self._app

    async def start(self) -> None:
        settings = self.ctx.settings
        self._socket = listen(settings.host, settings.port)
        self._port = int(self._socket.getsockname()[1])
        self._app = create_app(self.ctx, port=self._port)
        self._server = uvicorn.Server(
            uvicorn.Config(
                self._app,
                log_level="warning",
                lifespan="off",
                access_log=False,
                timeout_graceful_shutdown=2,
            )
        )
        await self.app.state.mcp.__aenter__()  # the per-project MCP servers' session managers
        self._task = asyncio.create_task(self._server.serve(sockets=[self._socket]), name="gateway-http")
        while not self._server.started:
            if self._task.done():
                self._task.result()  # raises why it could not start (e.g. the port is taken)
                raise RuntimeError("the gateway's HTTP server stopped before it started")
            await asyncio.sleep(0.02)

    @property
    def port(self) -> int:
        return self.ctx.settings.port if self._port is None else self._port

    @property
    def base_url(self) -> str:
        host = self.ctx.settings.host
        host = f"[{host}]" if ":" in host else host
        return f"http://{host}:{self.port}"

    async def stop(self) -> None:
        if self._server is not None:
            self._server.should_exit = True
        if self._task is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if self._app is not None:
            await self._app.state.mcp.close()
        if self._socket is not None:
            self._socket.close()


def make_context(bus: Bus, config: Config, settings: GatewaySettings) -> GatewayContext:
    token = settings.token or load_or_create_token(settings.data_home)
    return GatewayContext(bus=bus, config=config, settings=settings, auth=TokenChecker(token))


async def serve(config: Config, stop: asyncio.Event, settings: GatewaySettings | None = None) -> None:
    settings = settings or GatewaySettings.from_env()
    async with ServiceLifecycle(config, "gateway") as life:
        server = GatewayServer(make_context(life.bus, config, settings))
        await life.start(server)
        await life.run(stop, ready=f"gateway ready on {server.base_url}")
