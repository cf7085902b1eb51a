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

import uvicorn

from jidocode.shared.bus import Bus
from jidocode.shared.config import Config

from .app import create_app
from .auth import TokenChecker, load_or_create_token
from .context import GatewayContext
from .settings import GatewaySettings

__all__ = ["GatewayServer", "serve"]

log = logging.getLogger("jidocode.gateway")


class GatewayServer:
    """uvicorn serving the app over a connected bus; :attr:`port` is known once started."""

    def __init__(self, ctx: GatewayContext) -> None:
        self.ctx = ctx
        self.app = create_app(ctx)
        self._server = uvicorn.Server(
            uvicorn.Config(
                self.app,
                host=ctx.settings.host,
                port=ctx.settings.port,
                log_level="warning",
                lifespan="off",
                access_log=False,
                timeout_graceful_shutdown=2,
            )
        )
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        await self.app.state.mcp.__aenter__()  # the per-project MCP servers' session managers
        self._task = asyncio.create_task(self._server.serve(), name="gateway-http")
        while not self._server.started:
            if self._task.done():
                self._task.result()  # raises why it could not start (e.g. the port is taken)
                raise RuntimeError("the gateway's HTTP server stopped before it started")
            await asyncio.sleep(0.02)

    @property
    def port(self) -> int:
        for server in self._server.servers:
            for sock in server.sockets:
                return int(sock.getsockname()[1])
        return self.ctx.settings.port

    @property
    def base_url(self) -> str:
        host = self.ctx.settings.host
        host = f"[{host}]" if ":" in host else host
        return f"http://{host}:{self.port}"

    async def stop(self) -> None:
        self._server.should_exit = True
        if self._task is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        await self.app.state.mcp.close()


def make_context(bus: Bus, config: Config, settings: GatewaySettings) -> GatewayContext:
    token = settings.token or load_or_create_token(settings.data_home)
    return GatewayContext(bus=bus, config=config, settings=settings, auth=TokenChecker(token))


async def serve(config: Config, stop: asyncio.Event, settings: GatewaySettings | None = None) -> None:
    settings = settings or GatewaySettings.from_env()
    bus = await Bus.connect(config, "gateway")
    try:
        server = GatewayServer(make_context(bus, config, settings))
        await server.start()
        log.info("gateway ready on %s", server.base_url)
        await stop.wait()
        await server.stop()
    finally:
        await bus.close()
