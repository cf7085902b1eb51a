"""The gateway's ASGI application: auth, health, login, the JSON API, SSE, console and A2A.

:func:`create_app` assembles it over a :class:`~.context.GatewayContext`; every
route but ``GET /healthz`` and ``GET /login`` needs the token (:mod:`.auth`).
"""

from __future__ import annotations

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response
from starlette.routing import BaseRoute, Route

from jidocode.services.mcp_gateway import McpProjects

from . import a2a, api, console, streams
from .auth import COOKIE
from .context import GatewayContext
from .middleware import BodyLimit, RequireToken, error_body
from .openapi import openapi_document

__all__ = ["create_app"]


async def healthz(request: Request) -> Response:
    """Liveness and readiness: 200 while the bus is connected, else 503."""
    ctx: GatewayContext = request.app.state.ctx
    if ctx.bus.nc.is_connected:
        return JSONResponse({"status": "ok"})
    return JSONResponse({"status": "disconnected"}, status_code=503)


async def login(request: Request) -> Response:
    """``GET /login?token=<t>``: check the token, set the cookie, go to ``/``."""
    ctx: GatewayContext = request.app.state.ctx
    if not ctx.auth.matches(request.query_params.get("token")):
        return Response(
            error_body("unauthorized", "the login token is missing or wrong"),
            status_code=401,
            media_type="application/json",
        )
    response = RedirectResponse("/", status_code=303)
    response.set_cookie(
        COOKIE,
        request.query_params["token"],
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
        path="/",
    )
    return response


async def openapi(request: Request) -> Response:
    """The OpenAPI document of the JSON API."""
    return JSONResponse(request.app.state.openapi)


def create_app(ctx: GatewayContext) -> Starlette:
    """The gateway's app over ``ctx`` (its state carries ``ctx`` for every handler)."""
    routes: list[BaseRoute] = [
        Route("/healthz", healthz, methods=["GET"]),
        Route("/login", login, methods=["GET"]),
        Route("/openapi.json", openapi, methods=["GET"]),
        *api.routes(),
        *streams.routes(),
    ]
    routes.extend(console.routes(ctx))
    routes.extend(a2a.routes(ctx))
    # Each project's MCP server over streamable HTTP (docs/mcp.md), behind the same token;
    # GatewayServer opens and closes it (uvicorn runs without a lifespan here).
    mcp = McpProjects(ctx.bus)
    routes.append(Route("/projects/{project_id}/mcp", mcp, methods=["GET", "POST", "DELETE"]))
    middleware = [
        Middleware(RequireToken, checker=ctx.auth),
        Middleware(BodyLimit, limit=ctx.settings.max_body_bytes),
    ]
    if ctx.settings.cors_origins:
        middleware.insert(
            0,
            Middleware(
                CORSMiddleware,
                allow_origins=list(ctx.settings.cors_origins),
                allow_methods=["GET", "POST"],
                allow_headers=["Authorization", "Content-Type", "Last-Event-ID"],
            ),
        )
    app = Starlette(routes=routes, middleware=middleware)
    app.state.ctx = ctx
    app.state.mcp = mcp
    app.state.openapi = openapi_document()
    return app
