"""The user's OAuth login to an HTTP MCP server (``jidocode mcp-servers login``), done once.

:func:`login` connects to the server with the SDK's provider (:mod:`.oauth`) on a fresh login
file: the server's 401 starts the spec's flow (discovery, registration, PKCE, resource
indicator); the authorization URL is handed to ``show`` (the CLI prints it, and opens a browser
unless told not to); the authorization server redirects the browser to a one-shot callback on
the loopback (``http://127.0.0.1:<random port>/callback``, :class:`Callback`), whose code the
provider exchanges for tokens, stored 0600 in the data home. The login succeeds when the
server then lists its tools; only then does it replace an earlier login of the server.

A server whose authorization server offers no dynamic registration needs a client the user
registered there beforehand (:class:`PreRegistered`: its id, its secret if it has one, and the
callback's fixed port named in that registration): the login then uses it instead of
registering one, the secret sent as HTTP Basic (RFC 6749's default).

A refusal at the authorization server (``?error=access_denied``), a state that does not match,
or no callback within the time fails the login with :class:`LoginFailed` naming why; an
earlier login is then kept as it was.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Final

import anyio
import mcp_types as types
import uvicorn
from mcp import Client
from mcp.client._transport import TransportStreams
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.auth import AuthorizationCodeResult, OAuthClientInformationFull
from pydantic import AnyUrl, BaseModel, Field
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from jidocode.shared.errors import JidoError
from jidocode.shared.trust import locked

from .oauth import StoredLoginProvider, TokenFile, client_metadata

__all__ = ["CALLBACK_PATH", "Callback", "LoginFailed", "PreRegistered", "login"]

CALLBACK_PATH: Final = "/callback"
_CLIENT_INFO = types.Implementation(name="jidocode", version="1")


class LoginFailed(JidoError):
    """The login did not complete (``mcp_login_failed``): refused, timed out, or the flow failed."""

    error_type = "mcp_login_failed"


class PreRegistered(BaseModel):
    """A client the user registered at the authorization server (no dynamic registration there)."""

    client_id: str = Field(min_length=1, max_length=512)
    client_secret: str | None = Field(default=None, max_length=4096)
    #: The loopback port of the redirect URI registered with it (``0``: any free port).
    callback_port: int = Field(default=0, ge=0, le=65535)

    def client_info(self, redirect_uri: str) -> OAuthClientInformationFull:
        """The SDK's client record: a secret goes as HTTP Basic, no secret means a public client."""
        return OAuthClientInformationFull(
            client_id=self.client_id,
            client_secret=self.client_secret,
            redirect_uris=[AnyUrl(redirect_uri)],
            token_endpoint_auth_method="client_secret_basic" if self.client_secret else "none",
        )


class Callback:
    """The loopback redirect target: the first request to :data:`CALLBACK_PATH` is the answer."""

    def __init__(self) -> None:
        self.answer: asyncio.Future[AuthorizationCodeResult] = asyncio.get_running_loop().create_future()
        self.redirect_uri = ""
        self.app = Starlette(routes=[Route(CALLBACK_PATH, self._receive)])

    async def _receive(self, request: Request) -> PlainTextResponse:
        query = request.query_params
        if self.answer.done():
            return PlainTextResponse("this login is already answered", status_code=409)
        if query.get("error"):
            # the authorization server's words are shown as plain text, never markup
            why = query.get("error_description") or query["error"]
            self.answer.set_exception(LoginFailed(f"the authorization server refused the login: {why}"))
            return PlainTextResponse("The login was refused. You can close this tab.", status_code=400)
        self.answer.set_result(
            AuthorizationCodeResult(
                code=query.get("code", ""), state=query.get("state"), iss=query.get("iss")
            )
        )
        return PlainTextResponse("JidoCode is logged in. You can close this tab.")

    @contextlib.asynccontextmanager
    async def serving(self, port: int = 0) -> AsyncIterator[Callback]:
        """Serve on the loopback ``port`` (``0``: a random one) for the block (:attr:`redirect_uri` set)."""
        sock = socket.socket()
        try:
            sock.bind(("127.0.0.1", port))
        except OSError as exc:
            sock.close()
            raise LoginFailed(f"the login's callback cannot listen on 127.0.0.1:{port}: {exc}") from None
        sock.listen(16)  # a browser arriving before uvicorn is up waits in the backlog
        self.redirect_uri = f"http://127.0.0.1:{sock.getsockname()[1]}{CALLBACK_PATH}"
        web = uvicorn.Server(uvicorn.Config(self.app, log_level="warning", lifespan="off"))
        task = asyncio.create_task(web.serve(sockets=[sock]))
        try:
            yield self
        finally:
            web.should_exit = True
            with contextlib.suppress(Exception):
                await asyncio.wait_for(task, 10)
            sock.close()


@contextlib.asynccontextmanager
async def _transport(
    url: str, headers: dict[str, str], auth: StoredLoginProvider
) -> AsyncIterator[TransportStreams]:
    async with (
        create_mcp_http_client(headers=dict(headers), auth=auth) as http,
        streamable_http_client(url, http_client=http) as streams,
    ):
        yield streams


async def login(
    url: str,
    headers: dict[str, str],
    store: TokenFile,
    *,
    show: Callable[[str], Awaitable[None]],
    timeout_s: float,
    client: PreRegistered | None = None,
) -> list[types.Tool]:
    """Log in to the server at ``url``; the tools it then lists. The new login replaces the one in
    ``store`` only once complete (a failed login leaves the old one as it was).

    ``show(authorization URL)`` is awaited when the user must act. The authorization asks for
    the scope the server's 401 names and for the one a call of the tool runner was refused for
    (the stored login's ``wanted_scope``, a step-up). ``client``: a client the user registered
    beforehand, used instead of a dynamic registration. :class:`LoginFailed` when the login is
    refused, fails, or does not complete within ``timeout_s``.
    """
    pending = TokenFile(store.path.with_name(f".{store.path.name}.{os.getpid()}.pending"), store.url)
    pending.forget()
    try:
        wanted = store.read().wanted_scope
        tools = await _authorise(
            url, headers, pending, show=show, timeout_s=timeout_s, wanted_scope=wanted, registered=client
        )
        store.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        with locked(store.path):
            os.replace(pending.path, store.path)
        return tools
    finally:
        pending.forget()


async def _authorise(
    url: str,
    headers: dict[str, str],
    store: TokenFile,
    *,
    show: Callable[[str], Awaitable[None]],
    timeout_s: float,
    wanted_scope: str | None = None,
    registered: PreRegistered | None = None,
) -> list[types.Tool]:
    """The SDK's flow on ``store`` with the loopback callback, bounded by ``timeout_s``."""
    callback = Callback()
    async with callback.serving(registered.callback_port if registered is not None else 0):
        if registered is not None:  # the SDK registers no client when the store holds one
            store.update(client_info=registered.client_info(callback.redirect_uri))
        refused: list[BaseException] = []

        async def answer() -> AuthorizationCodeResult:
            try:
                return await callback.answer
            except LoginFailed as exc:
                refused.append(exc)
                scope.cancel()  # the SDK's flow would wait on: stop it here
                raise

        provider = StoredLoginProvider(
            url,
            store,
            client_metadata(callback.redirect_uri),
            wanted_scope=wanted_scope,
            redirect_handler=show,
            callback_handler=answer,
        )
        with anyio.move_on_after(timeout_s) as scope:
            try:
                async with Client(_transport(url, headers, provider), client_info=_CLIENT_INFO) as client:
                    return (await client.list_tools()).tools
            except Exception as exc:  # the SDK's flow or transport failed: say how, as a value
                if refused:
                    raise refused[0] from None
                raise LoginFailed(
                    f"the login to {url} failed: {_describe(exc)}", details={"url": url}
                ) from None
        if refused:
            raise refused[0]
        raise LoginFailed(
            f"the login to {url} did not complete within {timeout_s:g} s "
            "(no answer at the loopback callback, or the flow stopped)",
            details={"url": url},
        )


def _describe(exc: BaseException) -> str:
    if isinstance(exc, BaseExceptionGroup):
        return "; ".join(_describe(sub) for sub in exc.exceptions)
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
