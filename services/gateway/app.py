"""The gateway's ASGI application: auth, health, login, the JSON API, SSE, console and A2A.

:func:`create_app` assembles it over a :class:`~.context.GatewayContext` and the port the
gateway listens on; every route but ``GET /healthz``, ``GET /login`` and the A2A agents' public
cards needs the token (:mod:`.auth`, decision 0342), a state change with only the cookie must be a same-origin JSON request, and
MCP over HTTP a ``Host`` and ``Origin`` of this gateway (:mod:`.origin`).
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
from .auth import COOKIE, MAX_CHALLENGE
from .context import GatewayContext
from .middleware import BodyLimit, RequireToken, SameOrigin, error_body
from .openapi import openapi_document
from .origin import OwnOrigin

__all__ = ["create_app", "own_origin"]


async def healthz(request: Request) -> Response:
    """Liveness and readiness: 200 while the bus is connected, else 503; with ``?challenge=``, the
    :func:`~.auth.identity_proof` of it too (who holds the token knows this is its gateway)."""
    ctx: GatewayContext = request.app.state.ctx
    body = {"status": "ok" if ctx.bus.nc.is_connected else "disconnected"}
    challenge = request.query_params.get("challenge")
    if challenge and len(challenge) <= MAX_CHALLENGE:
        body["proof"] = ctx.auth.proof(challenge)
    return JSONResponse(body, status_code=200 if ctx.bus.nc.is_connected else 503)


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


def own_origin(ctx: GatewayContext, port: int) -> OwnOrigin:
    """The ``Host``/``Origin`` values of the gateway of ``ctx`` listening on ``port``."""
    return OwnOrigin.of(ctx.settings.host, port, ctx.settings.public_urls)


def create_app(ctx: GatewayContext, *, port: int) -> Starlette:
    """The gateway's app over ``ctx``, listening on ``port`` (the real one, never 0).

    Its state carries ``ctx`` for every handler.
    """
    own = own_origin(ctx, port)
    routes: list[BaseRoute] = [
        Route("/healthz", healthz, methods=["GET"]),
        Route("/login", login, methods=["GET"]),
        Route("/openapi.json", openapi, methods=["GET"]),
        *api.routes(),
        *streams.routes(),
    ]
    routes.extend(console.routes(ctx))
    routes.extend(a2a.routes(ctx))
    # Each project's MCP server over streamable HTTP (docs/mcp.md), behind the same token and
    # SameOrigin's Host/Origin check; the SDK's DNS-rebinding check is on with the same values
    # as a second wall. GatewayServer opens and closes it (uvicorn runs without a lifespan here).
    mcp = McpProjects(ctx.bus, allowed_hosts=list(own.hosts), allowed_origins=list(own.origins))
    routes.append(Route("/projects/{project_id}/mcp", mcp, methods=["GET", "POST", "DELETE"]))
    middleware = [
        Middleware(RequireToken, checker=ctx.auth),
        Middleware(SameOrigin, own=own, checker=ctx.auth),
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
    app.state.own_origin = own
    app.state.openapi = openapi_document()
    return app
