"""What the egress tests share: a web server standing in for the internet, on an address that is
not loopback (the proxy never connects to loopback), and the names the tests map to it."""

from __future__ import annotations

import contextlib
import ipaddress
import socket
from collections.abc import AsyncIterator
from dataclasses import dataclass

from aiohttp import web

__all__ = ["Internet", "internet", "lan_address"]

PAGE = (
    "<html><head><title>Pkg index</title></head><body><h1>Package index</h1>"
    "<p>Install <b>jidotest</b> with <a href='/jidotest'>this link</a>.</p></body></html>"
)


def lan_address() -> str | None:
    """An IPv4 address of this machine that is not loopback (``None``: it has none)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("192.0.2.1", 9))  # a UDP "connect" sends nothing: it picks the route
        except OSError:
            return None
        address = str(probe.getsockname()[0])
    return None if ipaddress.ip_address(address).is_loopback else address


@dataclass(frozen=True)
class Internet:
    """The stand-in: its address and port; ``url(name, path)`` on a test name."""

    address: str
    port: int

    def url(self, name: str, path: str = "/page") -> str:
        return f"http://{name}:{self.port}{path}"


def _app() -> web.Application:
    async def page(request: web.Request) -> web.Response:
        return web.Response(text=PAGE, content_type="text/html")

    async def plain(request: web.Request) -> web.Response:
        return web.Response(text=f"hello {request.host}\n")

    def redirect(to: str) -> object:
        async def handler(request: web.Request) -> web.Response:
            raise web.HTTPFound(f"http://{to}:{request.url.port}/page")

        return handler

    app = web.Application()
    app.router.add_get("/page", page)
    app.router.add_get("/plain", plain)
    app.router.add_get("/to-denied", redirect("bad.test"))  # type: ignore[arg-type]
    app.router.add_get("/to-allowed", redirect("pkg.test"))  # type: ignore[arg-type]
    return app


@contextlib.asynccontextmanager
async def internet(address: str) -> AsyncIterator[Internet]:
    """The stand-in web server on ``address`` (an ephemeral port)."""
    runner = web.AppRunner(_app())
    await runner.setup()
    site = web.TCPSite(runner, address, 0)
    await site.start()
    port = int(runner.addresses[0][1])
    try:
        yield Internet(address, port)
    finally:
        await runner.cleanup()
