"""OAuth for HTTP MCP servers: the user's stored login and the SDK's client provider around it.

An HTTP MCP server that answers 401 is authorised as the MCP authorization spec says —
protected-resource metadata discovery, authorization-server metadata, dynamic client
registration, PKCE, resource indicators, refresh — by the SDK's
:class:`mcp.client.auth.OAuthClientProvider`; no OAuth of our own. What is ours:

* **the store**: one file per server in the data home (``<data home>/mcp_oauth/<server>-<hash of
  its URL>.json``, 0600 in a 0700 folder, written atomically under a lock file), never in a
  project: a data home inside the project refuses the store (:class:`InvalidInput`). It keeps
  the tokens with their absolute expiry, the registered client and the authorization server's
  metadata. A file that is missing or fails to parse holds no login (fail closed);
* **who logs in**: the user, once (``jidocode mcp-servers login``, :mod:`.login`). The tool
  runner only uses the stored tokens (refreshing them when they expire); when a server wants a
  new authorization the runner never opens a browser: the flow stops with
  :class:`LoginRequired`, naming the command.

:class:`StoredLoginProvider` closes two gaps of the SDK's provider for a login that outlives
its process (python-sdk issue #3250): a stored token's expiry and the authorization server's
token endpoint are restored when the provider starts, so an expired access token is refreshed
instead of being sent. It also carries a scope step-up (SEP-2350) across the user's login: a
server that answers a call ``403 insufficient_scope`` stops the runner's flow like a 401, the
scope it wants is kept with the stored login (``wanted_scope``), and the next login asks for it
next to what the server's 401 names.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import time
from collections.abc import AsyncGenerator, Awaitable, Callable
from pathlib import Path
from typing import Final

import httpx2
from mcp.client.auth import OAuthClientProvider
from mcp.client.auth.utils import union_scopes
from mcp.shared.auth import OAuthClientInformationFull, OAuthClientMetadata, OAuthMetadata, OAuthToken
from pydantic import AnyUrl, BaseModel, ValidationError

from jidocode.shared.errors import InvalidInput, JidoError
from jidocode.shared.natsserver import write_private
from jidocode.shared.trust import locked

__all__ = [
    "LOGIN_DIR",
    "LoginRequired",
    "StoredLogin",
    "StoredLoginProvider",
    "TokenFile",
    "client_metadata",
    "login_command",
    "login_path",
    "runner_auth",
]

#: The folder of the data home holding the logins.
LOGIN_DIR: Final = "mcp_oauth"
#: A login file larger than this is not read (no login).
MAX_LOGIN_BYTES: Final = 256 * 1024
#: The redirect URI of the tool runner's provider (never used: it never asks for an authorization).
RUNNER_REDIRECT: Final = "http://127.0.0.1/callback"


class _OwnStops(logging.Filter):
    """Drops the SDK's "OAuth flow error" log when the error is one of ours (a login needed, a
    refused login): that is reported as a value, naming what to do, not as a traceback."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.exc_info and isinstance(record.exc_info[1], JidoError))


logging.getLogger("mcp.client.auth.oauth2").addFilter(_OwnStops())


class LoginRequired(JidoError):
    """An HTTP MCP server wants the user to authorise JidoCode (``mcp_login_required``)."""

    error_type = "mcp_login_required"


class StoredLogin(BaseModel):
    """What one login file holds."""

    url: str
    tokens: OAuthToken | None = None
    #: When the access token expires (seconds since the epoch), when the server said.
    expires_at: float | None = None
    client_info: OAuthClientInformationFull | None = None
    metadata: OAuthMetadata | None = None
    #: The scope a server asked for that this login lacks (a step-up): the next login asks for it.
    wanted_scope: str | None = None


def login_command(root: str, server: str) -> str:
    return f"jidocode mcp-servers login {root} {server}"


def login_path(data_home: Path, server: str, url: str, *, project_root: str | None = None) -> Path:
    """``<data home>/mcp_oauth/<server>-<12 hex of sha256(url)>.json``; :class:`InvalidInput` when
    the data home lies inside ``project_root`` (a login is never kept in a project)."""
    home = Path(os.path.realpath(data_home))
    if project_root is not None:
        root = Path(os.path.realpath(project_root))
        if home == root or root in home.parents:
            raise InvalidInput(
                f"the data home {home} is inside the project {root}: MCP logins are never kept in a "
                "project (set JIDO_DATA_HOME to a folder outside it)",
                details={"data_home": str(home), "root": str(root)},
            )
    digest = hashlib.sha256(url.encode()).hexdigest()[:12]
    return home / LOGIN_DIR / f"{server}-{digest}.json"


class TokenFile:
    """The SDK's ``TokenStorage`` on one login file (read fresh, changed under its lock)."""

    def __init__(self, path: Path, url: str) -> None:
        self.path = path
        self.url = url

    def read(self) -> StoredLogin:
        """The stored login; an empty one when the file is missing, too large, a link or invalid."""
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_NOFOLLOW)
        except OSError:
            return StoredLogin(url=self.url)
        with os.fdopen(fd, "rb") as fh:
            raw = fh.read(MAX_LOGIN_BYTES + 1)
        try:
            login = StoredLogin.model_validate_json(raw)
        except ValidationError:
            return StoredLogin(url=self.url)
        return login if len(raw) <= MAX_LOGIN_BYTES and login.url == self.url else StoredLogin(url=self.url)

    def update(self, **changes: object) -> None:
        """Change some fields of the stored login (the rest kept), atomically, 0600."""
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        with locked(self.path):
            login = self.read().model_copy(update=changes)
            write_private(self.path, login.model_dump_json(exclude_none=True, indent=2) + "\n")

    def forget(self) -> bool:
        """Remove the login; whether there was one."""
        with contextlib.suppress(FileNotFoundError), locked(self.path):
            os.unlink(self.path)
            return True
        return False

    # --- TokenStorage --------------------------------------------------------------------------

    async def get_tokens(self) -> OAuthToken | None:
        """The stored tokens, ``expires_in`` counted from now (0 once expired)."""
        login = self.read()
        if login.tokens is None or login.expires_at is None:
            return login.tokens
        left = max(0, int(login.expires_at - time.time()))
        return login.tokens.model_copy(update={"expires_in": left})

    async def set_tokens(self, tokens: OAuthToken) -> None:
        expires_at = None if tokens.expires_in is None else time.time() + tokens.expires_in
        self.update(tokens=tokens, expires_at=expires_at)

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        return self.read().client_info

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        self.update(client_info=client_info)


def client_metadata(redirect_uri: str) -> OAuthClientMetadata:
    """What JidoCode registers: a public client (PKCE, no secret) with one loopback redirect."""
    return OAuthClientMetadata(
        client_name="JidoCode",
        redirect_uris=[AnyUrl(redirect_uri)],
        grant_types=["authorization_code", "refresh_token"],
        response_types=["code"],
        token_endpoint_auth_method="none",
    )


class StoredLoginProvider(OAuthClientProvider):
    """The SDK's provider on a :class:`TokenFile`, restoring what a stored login needs to refresh:
    the access token's expiry and the authorization server's metadata (python-sdk #3250); an
    authorization asks for ``wanted_scope`` too (a step-up the runner met, see :func:`runner_auth`)."""

    def __init__(
        self,
        url: str,
        store: TokenFile,
        metadata: OAuthClientMetadata,
        *,
        wanted_scope: str | None = None,
        **handlers: object,
    ) -> None:
        super().__init__(url, metadata, store, **handlers)  # type: ignore[arg-type]
        self.store = store
        self.wanted_scope = wanted_scope

    async def _initialize(self) -> None:
        await super()._initialize()
        tokens = self.context.current_tokens
        if tokens is not None and tokens.expires_in is not None:
            self.context.update_token_expiry(tokens)
        if self.context.oauth_metadata is None:
            self.context.oauth_metadata = self.store.read().metadata

    async def _perform_authorization(self) -> httpx2.Request:
        """The SDK's authorization, its scope (what the server's 401 names) with the wanted one."""
        metadata = self.context.client_metadata
        metadata.scope = union_scopes(metadata.scope, self.wanted_scope)
        return await super()._perform_authorization()

    async def _handle_token_response(self, response: httpx2.Response) -> None:
        await super()._handle_token_response(response)
        if self.context.oauth_metadata is not None:
            self.store.update(metadata=self.context.oauth_metadata)


class _LoginOn401(httpx2.Auth):
    """No login is stored: a 401 means the user must log in (the runner registers no client)."""

    def __init__(self, login_needed: Callable[[str], Awaitable[None]]) -> None:
        self.login_needed = login_needed

    async def async_auth_flow(
        self, request: httpx2.Request
    ) -> AsyncGenerator[httpx2.Request, httpx2.Response]:
        response = yield request
        if response.status_code == 401:
            await self.login_needed("")
            raise LoginRequired("the server wants a login")


def runner_auth(url: str, store: TokenFile, *, login_needed: Callable[[str], Awaitable[None]]) -> httpx2.Auth:
    """The tool runner's OAuth: the stored login's tokens, refreshed by the SDK's provider; where the
    server wants a new authorization (or no login is stored) ``login_needed(authorization URL)``
    is awaited and the flow stops with :class:`LoginRequired` — the runner never opens a browser
    and never registers a client (the user's login does). The scope that authorization would have
    asked for is kept as the login's ``wanted_scope`` when it is more than the login was granted
    (a ``403 insufficient_scope`` step-up), so the user's next login asks for it."""
    stored = store.read()
    if stored.client_info is None or stored.tokens is None:
        return _LoginOn401(login_needed)

    async def redirect(authorization_url: str) -> None:
        _keep_wanted_scope(store, provider.context.client_metadata.scope)
        await login_needed(authorization_url)
        raise LoginRequired("the server wants a new login")

    async def no_callback() -> object:  # pragma: no cover - redirect always raises first
        raise LoginRequired("the server wants a new login")

    provider = StoredLoginProvider(
        url, store, client_metadata(RUNNER_REDIRECT), redirect_handler=redirect, callback_handler=no_callback
    )
    return provider


def _keep_wanted_scope(store: TokenFile, scope: str | None) -> None:
    """Record ``scope`` as the login's wanted scope when it holds one the login was not granted."""
    login = store.read()
    granted = set((login.tokens.scope or "").split()) if login.tokens is not None else set()
    wanted = union_scopes(login.wanted_scope, scope)
    if wanted and not set(wanted.split()) <= granted:
        store.update(wanted_scope=wanted)
