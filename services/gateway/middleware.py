"""The gateway's ASGI middleware: the token check, the same-origin check and the body limit.

All are plain ASGI (not ``BaseHTTPMiddleware``) so streamed responses (SSE)
pass through untouched.
"""

from __future__ import annotations

import json
from typing import Any

from starlette.requests import HTTPConnection
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .a2a.card import is_card_path
from .auth import TokenChecker
from .origin import OwnOrigin, Refusal, is_mcp_path, mcp_refusal, state_change_refusal

__all__ = ["PUBLIC_PATHS", "BodyLimit", "RequireToken", "SameOrigin", "error_body"]

#: Paths that need no token: the health check and the login that checks one.
PUBLIC_PATHS = frozenset({"/healthz", "/login"})

#: The request headers :class:`SameOrigin` judges by.
_CHECKED_HEADERS = ("host", "origin", "referer", "content-type")


def error_body(error_type: str, message: str, details: dict[str, Any] | None = None) -> bytes:
    """``{"error": {"type", "message", "details"}}`` as JSON bytes."""
    return json.dumps({"error": {"type": error_type, "message": message, "details": details or {}}}).encode()


async def _send_json(
    send: Send, status: int, body: bytes, extra: list[tuple[bytes, bytes]] | None = None
) -> None:
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers + (extra or [])})
    await send({"type": "http.response.body", "body": body})


def _is_public(scope: Scope) -> bool:
    """Whether a request needs no token: :data:`PUBLIC_PATHS`, and a ``GET`` of an A2A agent's
    public card (decision 0342)."""
    if scope["path"] in PUBLIC_PATHS:
        return True
    return scope["type"] == "http" and scope["method"] in ("GET", "HEAD") and is_card_path(scope["path"])


class RequireToken:
    """Refuse (401) every HTTP request but the public ones (:func:`_is_public`) that lacks the token."""

    def __init__(self, app: ASGIApp, checker: TokenChecker) -> None:
        self.app = app
        self.checker = checker

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket") or _is_public(scope):
            await self.app(scope, receive, send)
            return
        if self.checker.allows(HTTPConnection(scope)):
            await self.app(scope, receive, send)
            return
        if scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 1008})
            return
        body = error_body("unauthorized", "a valid token is required (Authorization: Bearer, or log in)")
        await _send_json(send, 401, body, [(b"www-authenticate", b"Bearer")])


class SameOrigin:
    """Refuse a state change the cookie alone authenticates unless it is a same-origin JSON
    request, and an MCP request whose ``Host`` or ``Origin`` is not this gateway's
    (:mod:`.origin`: 403, or 415 for a body that is not JSON).

    It runs after :class:`RequireToken`, so a request that reaches it showed a valid token;
    only a bearer header that carries it waives the origin check (a request let in by its
    cookie, with an empty ``Authorization`` or one of another scheme, is judged as the cookie's).
    """

    def __init__(self, app: ASGIApp, own: OwnOrigin, checker: TokenChecker) -> None:
        self.app = app
        self.own = own
        self.checker = checker

    def refusal(self, scope: Scope) -> Refusal | None:
        conn = HTTPConnection(scope)
        headers = {name: conn.headers[name] for name in _CHECKED_HEADERS if name in conn.headers}
        if is_mcp_path(scope["path"]):
            refused = mcp_refusal(self.own, headers)
            if refused is not None:
                return refused
        bearer = self.checker.allows_by_header(conn)
        return state_change_refusal(self.own, scope["method"], headers, bearer=bearer)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] in PUBLIC_PATHS:
            await self.app(scope, receive, send)
            return
        refused = self.refusal(scope)
        if refused is None:
            await self.app(scope, receive, send)
            return
        await _send_json(
            send, refused.status, error_body(refused.error_type, refused.message, refused.details)
        )


class BodyLimit:
    """Refuse (413) a request whose body is larger than ``limit`` bytes, declared or streamed."""

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app = app
        self.limit = limit

    def _message(self) -> bytes:
        return error_body(
            "payload_too_large",
            f"the request body is larger than the limit of {self.limit} bytes",
            {"limit": self.limit},
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        refused = self._declared_refusal(scope["headers"])
        if refused is not None:
            await _send_json(send, *refused)
            return
        await self._streamed(scope, receive, send)

    def _declared_refusal(self, headers: list[tuple[bytes, bytes]]) -> tuple[int, bytes] | None:
        """The status and body refusing a ``Content-Length`` that is no number (400) or over the
        limit (413); ``None`` when the declared length (if any) is within it."""
        for name, value in headers:
            if name != b"content-length":
                continue
            try:
                declared = int(value)
            except ValueError:
                return 400, error_body("invalid_input", "Content-Length is not a number")
            if declared > self.limit:
                return 413, self._message()
        return None

    async def _streamed(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Run the app, counting the body as it is read: past the limit, 413 (if no response
        has started yet)."""
        received = 0
        started = False
        too_large = False

        async def limited_receive() -> Message:
            nonlocal received, too_large
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.limit:
                    too_large = True
                    raise _TooLarge
            return message

        async def tracking_send(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, limited_receive, tracking_send)
        except _TooLarge:
            if not started:
                await _send_json(send, 413, self._message())
        except Exception:
            if too_large and not started:  # the app wrapped our signal in its own error
                await _send_json(send, 413, self._message())
                return
            raise


class _TooLarge(Exception):
    """Raised inside ``receive`` when a streamed body passes the limit."""
