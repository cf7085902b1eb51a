"""A local OAuth authorization server (on authlib) and an MCP server it protects (the SDK's own).

* :class:`AuthServer`: authlib's ``AuthorizationServer`` served by Starlette — RFC 8414 metadata,
  RFC 7591 dynamic registration (public clients), the authorization-code grant with PKCE
  required (RFC 7636, S256), refresh tokens (rotated), the RFC 8707 ``resource`` kept on the code
  and its tokens. ``/authorize`` consents at once for the test's user (the test plays the browser).
  The test can revoke every token (:meth:`AuthServer.revoke_all`) or expire the access tokens
  (:meth:`AuthServer.expire_access_tokens`).
* :func:`protected_mcp`: the SDK's ``MCPServer`` with its auth settings (protected-resource
  metadata naming the authorization server, bearer tokens checked against the server's store and
  bound to the resource), with a ``whoami`` tool and two that elicit (``deploy``: a yes/no;
  ``colour``: a form a yes cannot fill).

Both run under uvicorn on random loopback ports, on different origins (discovery goes through
the protected-resource metadata, not the legacy same-origin guess).
"""

from __future__ import annotations

import asyncio
import json
import secrets
import socket
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Annotated, Any
from urllib.parse import parse_qsl

import uvicorn
from authlib.oauth2 import AuthorizationServer as _AuthorizationServer
from authlib.oauth2.rfc6749 import ClientMixin, JsonPayload, JsonRequest, OAuth2Request, grants
from authlib.oauth2.rfc6749.requests import BasicOAuth2Payload
from authlib.oauth2.rfc6750 import BearerTokenGenerator
from authlib.oauth2.rfc7591 import ClientRegistrationEndpoint
from authlib.oauth2.rfc7636 import CodeChallenge
from mcp.server.auth.provider import AccessToken
from mcp.server.auth.settings import AuthSettings
from mcp.server.mcpserver import AcceptedElicitation, Elicit, ElicitationResult, MCPServer, Resolve
from pydantic import BaseModel
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

USER = "alice"


@dataclass
class _Client(ClientMixin):
    client_id: str
    metadata: dict[str, Any]

    def get_client_id(self) -> str:
        return self.client_id

    def get_default_redirect_uri(self) -> str:
        return str(self.metadata["redirect_uris"][0])

    def get_allowed_scope(self, scope: str) -> str:
        return scope or ""

    def check_redirect_uri(self, redirect_uri: str) -> bool:
        return redirect_uri in self.metadata.get("redirect_uris", [])

    def check_endpoint_auth_method(self, method: str, endpoint: str) -> bool:
        return method == "none"

    def check_response_type(self, response_type: str) -> bool:
        return response_type == "code"

    def check_grant_type(self, grant_type: str) -> bool:
        return grant_type in ("authorization_code", "refresh_token")


@dataclass
class _Code:
    code: str
    client_id: str
    redirect_uri: str
    scope: str
    code_challenge: str
    code_challenge_method: str
    resource: str

    def get_redirect_uri(self) -> str:
        return self.redirect_uri

    def get_scope(self) -> str:
        return self.scope


@dataclass
class _Token:
    client_id: str
    access_token: str
    refresh_token: str | None
    scope: str
    resource: str
    expires_at: float
    revoked: bool = False

    def check_client(self, client: _Client) -> bool:
        return client.client_id == self.client_id

    def get_scope(self) -> str:
        return self.scope


@dataclass
class Store:
    """What the authorization server issued, and what the test counts."""

    clients: dict[str, _Client] = field(default_factory=dict)
    codes: dict[str, _Code] = field(default_factory=dict)
    tokens: list[_Token] = field(default_factory=list)
    #: Each PKCE challenge method an authorization request used.
    challenges: list[str] = field(default_factory=list)
    grants: list[str] = field(default_factory=list)

    def by_access(self, value: str) -> _Token | None:
        return next((t for t in self.tokens if t.access_token == value), None)


class _Payload(JsonPayload):
    def __init__(self, data: dict[str, Any]) -> None:
        self._data = data

    @property
    def data(self) -> dict[str, Any]:
        return self._data


class _Request(OAuth2Request):
    """authlib's request on an already-read Starlette request (query and form)."""

    def __init__(self, request: Request, form: dict[str, str]) -> None:
        super().__init__(request.method, str(request.url), headers=dict(request.headers))
        self._args = dict(request.query_params)
        self._form = form
        self.payload = BasicOAuth2Payload({**self._args, **form})

    @property
    def args(self) -> dict[str, str]:
        return self._args

    @property
    def form(self) -> dict[str, str]:
        return self._form


class _Server(_AuthorizationServer):  # type: ignore[misc]
    def __init__(self, store: Store, expires_in: int) -> None:
        super().__init__()
        self.store = store
        self.register_token_generator(
            "default",
            BearerTokenGenerator(
                lambda *a, **k: secrets.token_urlsafe(24),
                lambda *a, **k: secrets.token_urlsafe(32),
                lambda client, grant_type: expires_in,
            ),
        )

    def query_client(self, client_id: str) -> _Client | None:
        return self.store.clients.get(client_id)

    def save_token(self, token: dict[str, Any], request: OAuth2Request) -> None:
        source = request.authorization_code or request.refresh_token
        resource = getattr(source, "resource", "")
        self.store.tokens.append(
            _Token(
                client_id=request.client.client_id,
                access_token=token["access_token"],
                refresh_token=token.get("refresh_token"),
                scope=token.get("scope", ""),
                resource=resource,
                expires_at=time.time() + token["expires_in"],
            )
        )

    def create_oauth2_request(self, request: OAuth2Request) -> OAuth2Request:
        return request

    def create_json_request(self, request: JsonRequest) -> JsonRequest:
        return request

    def handle_response(self, status: int, body: Any, headers: Any) -> Response:
        text = json.dumps(body) if isinstance(body, dict) else (body or "")
        return Response(text, status_code=status, headers=dict(headers))

    def send_signal(self, name: str, *args: Any, **kwargs: Any) -> None:
        return None


class _CodeGrant(grants.AuthorizationCodeGrant):  # type: ignore[misc]
    TOKEN_ENDPOINT_AUTH_METHODS = ["none"]

    def save_authorization_code(self, code: str, request: OAuth2Request) -> None:
        store: Store = self.server.store
        data = request.payload.data
        store.challenges.append(data.get("code_challenge_method", ""))
        store.codes[code] = _Code(
            code=code,
            client_id=request.client.client_id,
            redirect_uri=data.get("redirect_uri", ""),
            scope=request.scope or "",
            code_challenge=data.get("code_challenge", ""),
            code_challenge_method=data.get("code_challenge_method", ""),
            resource=data.get("resource", ""),
        )

    def query_authorization_code(self, code: str, client: _Client) -> _Code | None:
        found = self.server.store.codes.get(code)
        return found if found is not None and found.client_id == client.client_id else None

    def delete_authorization_code(self, authorization_code: _Code) -> None:
        self.server.store.codes.pop(authorization_code.code, None)

    def authenticate_user(self, authorization_code: _Code) -> str:
        self.server.store.grants.append("authorization_code")
        return USER


class _RefreshGrant(grants.RefreshTokenGrant):  # type: ignore[misc]
    TOKEN_ENDPOINT_AUTH_METHODS = ["none"]
    INCLUDE_NEW_REFRESH_TOKEN = True

    def authenticate_refresh_token(self, refresh_token: str) -> _Token | None:
        found = next((t for t in self.server.store.tokens if t.refresh_token == refresh_token), None)
        return None if found is None or found.revoked else found

    def authenticate_user(self, refresh_token: _Token) -> str:
        self.server.store.grants.append("refresh_token")
        return USER

    def revoke_old_credential(self, refresh_token: _Token) -> None:
        refresh_token.revoked = True


class _Registration(ClientRegistrationEndpoint):  # type: ignore[misc]
    def authenticate_token(self, request: JsonRequest) -> bool:
        return True  # open registration, as MCP clients expect

    def resolve_public_key(self, request: JsonRequest) -> None:
        return None

    def save_client(
        self, client_info: dict[str, Any], client_metadata: dict[str, Any], request: Any
    ) -> _Client:
        client = _Client(client_info["client_id"], {**client_metadata, "token_endpoint_auth_method": "none"})
        self.server.store.clients[client.client_id] = client
        return client

    def get_server_metadata(self) -> dict[str, Any]:
        return {}


class AuthServer:
    """The authorization server's app and store; :attr:`base` once served."""

    def __init__(self, *, expires_in: int = 3600) -> None:
        self.store = Store()
        self.server = _Server(self.store, expires_in)
        self.server.register_grant(_CodeGrant, [CodeChallenge(required=True)])
        self.server.register_grant(_RefreshGrant)
        self.server.register_endpoint(_Registration)
        self.base = ""
        self.app = Starlette(
            routes=[
                Route("/.well-known/oauth-authorization-server", self._metadata),
                Route("/register", self._register, methods=["POST"]),
                Route("/authorize", self._authorize),
                Route("/token", self._token, methods=["POST"]),
            ]
        )

    async def _metadata(self, _: Request) -> JSONResponse:
        return JSONResponse(
            {
                "issuer": self.base,
                "authorization_endpoint": f"{self.base}/authorize",
                "token_endpoint": f"{self.base}/token",
                "registration_endpoint": f"{self.base}/register",
                "response_types_supported": ["code"],
                "grant_types_supported": ["authorization_code", "refresh_token"],
                "code_challenge_methods_supported": ["S256"],
                "token_endpoint_auth_methods_supported": ["none"],
            }
        )

    async def _register(self, request: Request) -> Response:
        req = JsonRequest(request.method, str(request.url), dict(request.headers))
        req.payload = _Payload(json.loads(await request.body()))
        return self.server.create_endpoint_response(  # type: ignore[no-any-return]
            ClientRegistrationEndpoint.ENDPOINT_NAME, req
        )

    async def _authorize(self, request: Request) -> Response:
        req = _Request(request, {})
        grant = self.server.get_consent_grant(req, end_user=USER)  # the user consents at once
        return self.server.create_authorization_response(req, grant_user=USER, grant=grant)  # type: ignore[no-any-return]

    async def _token(self, request: Request) -> Response:
        form = dict(parse_qsl((await request.body()).decode()))
        return self.server.create_token_response(_Request(request, form))  # type: ignore[no-any-return]

    def revoke_all(self) -> None:
        """Revoke every access and refresh token (the user withdrew the grant)."""
        for token in self.store.tokens:
            token.revoked = True

    def expire_access_tokens(self) -> None:
        for token in self.store.tokens:
            token.expires_at = 0.0


class _Verifier:
    def __init__(self, store: Store) -> None:
        self.store = store

    async def verify_token(self, token: str) -> AccessToken | None:
        found = self.store.by_access(token)
        if found is None or found.revoked or found.expires_at < time.time():
            return None
        return AccessToken(
            token=token,
            client_id=found.client_id,
            scopes=found.scope.split(),
            resource=found.resource,
            subject=USER,
        )


class Answer(BaseModel):
    colour: str


class Confirm(BaseModel):
    approve: bool


def _ask_deploy() -> Elicit[Confirm]:
    return Elicit("Deploy to production?", Confirm)


def _ask_colour() -> Elicit[Answer]:
    return Elicit("Which colour?", Answer)


def protected_mcp(auth_base: str, base: str, store: Store) -> MCPServer:
    """The SDK's server at ``<base>/mcp``, protected by the authorization server at ``auth_base``."""
    server = MCPServer(
        "guarded",
        token_verifier=_Verifier(store),
        auth=AuthSettings(
            issuer_url=auth_base,  # type: ignore[arg-type]
            resource_server_url=f"{base}/mcp",  # type: ignore[arg-type]
            validate_token_resource=True,
        ),
    )

    @server.tool()
    def whoami() -> str:
        """Who the bearer token names."""
        return f"hello {USER}"

    @server.tool()
    def deploy(answer: Annotated[ElicitationResult[Confirm], Resolve(_ask_deploy)]) -> str:
        """Deploy, once the user confirms (an elicitation, on either protocol generation)."""
        return f"accept:{answer.data.approve}" if isinstance(answer, AcceptedElicitation) else answer.action

    @server.tool()
    def colour(answer: Annotated[ElicitationResult[Answer], Resolve(_ask_colour)]) -> str:
        """Ask the user a colour (a form a yes cannot fill)."""
        return f"accept:{answer.data.colour}" if isinstance(answer, AcceptedElicitation) else answer.action

    return server


def _listener() -> tuple[socket.socket, str]:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)  # connections made before uvicorn is up wait in the backlog: nothing to poll
    return sock, f"http://127.0.0.1:{sock.getsockname()[1]}"


@asynccontextmanager
async def _served(app: Any, sock: socket.socket) -> AsyncIterator[None]:
    web = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))
    task = asyncio.create_task(web.serve(sockets=[sock]))
    try:
        yield
    finally:
        web.should_exit = True
        await asyncio.wait_for(task, 30)
        sock.close()


@dataclass
class OAuthWorld:
    auth: AuthServer
    #: The protected MCP server's URL (``…/mcp``).
    url: str


@asynccontextmanager
async def oauth_world(*, expires_in: int = 3600) -> AsyncIterator[OAuthWorld]:
    """The authorization server and the protected MCP server, served."""
    auth = AuthServer(expires_in=expires_in)
    auth_sock, auth.base = _listener()
    mcp_sock, base = _listener()
    mcp = protected_mcp(auth.base, base, auth.store)
    async with _served(auth.app, auth_sock), _served(mcp.streamable_http_app(), mcp_sock):
        yield OAuthWorld(auth, f"{base}/mcp")
