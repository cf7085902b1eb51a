"""The gateway's one access token: where it comes from and how a request shows it.

A token is generated on first run (``secrets.token_urlsafe``, 256 bits) and
kept in ``<data home>/gateway/token`` (0700 folder, 0600 file), or configured
through ``JIDO_GATEWAY_TOKEN`` (replicas share it). A request shows it as
``Authorization: Bearer <token>`` or as the ``jidocode_token`` cookie that
``GET /login?token=`` sets. Comparisons are constant-time.

Whoever holds the token can check that a gateway is the one with that token without showing
it: ``GET /healthz?challenge=<nonce>`` answers :func:`identity_proof` of the nonce (an HMAC
keyed by the token), which no other program listening on the port can compute. ``jidocode up``
and ``jidocode console`` check it before they print the login URL (decision 0309).
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # `jidocode console` checks a proof with this module: it stays light to import
    from starlette.requests import HTTPConnection

__all__ = ["COOKIE", "MAX_CHALLENGE", "TokenChecker", "identity_proof", "load_or_create_token", "token_file"]

#: The cookie ``/login`` sets.
COOKIE = "jidocode_token"
#: The longest ``/healthz`` challenge the gateway answers.
MAX_CHALLENGE = 128
#: What the identity proof's HMAC covers before the nonce (the token keys nothing else).
_PROOF_CONTEXT = b"jidocode-gateway-identity\0"


def identity_proof(token: str, challenge: str) -> str:
    """The proof that a gateway holds ``token``: HMAC-SHA256 of ``challenge`` keyed by it (hex)."""
    return hmac.new(token.encode(), _PROOF_CONTEXT + challenge.encode(), hashlib.sha256).hexdigest()


def token_file(data_home: Path) -> Path:
    """``<data home>/gateway/token``."""
    return data_home / "gateway" / "token"


def load_or_create_token(data_home: Path) -> str:
    """The stored token, generated (and stored 0600) when there is none yet."""
    path = token_file(data_home)
    try:
        token = path.read_text().strip()
    except FileNotFoundError:
        token = ""
    if token:
        if path.stat().st_mode & 0o077:
            os.chmod(path, 0o600)  # never leave it readable by others
        return token
    path.parent.mkdir(parents=True, exist_ok=True)
    os.chmod(path.parent, 0o700)
    token = secrets.token_urlsafe(32)
    from jidocode.shared.natsserver import write_private

    write_private(path, token + "\n")
    return token


class TokenChecker:
    """Whether a request carries the deployment's token."""

    def __init__(self, token: str) -> None:
        if not token:
            raise ValueError("the gateway token must not be empty")
        self._token = token.encode()

    def matches(self, candidate: str | None) -> bool:
        if not candidate:
            return False
        return hmac.compare_digest(candidate.encode(), self._token)

    @staticmethod
    def bearer(conn: HTTPConnection) -> str | None:
        """The token of the request's ``Authorization: Bearer`` header, if it has one."""
        scheme, _, value = conn.headers.get("authorization", "").partition(" ")
        if scheme.lower() == "bearer" and value.strip():
            return value.strip()
        return None

    def presented(self, conn: HTTPConnection) -> str | None:
        """The token the request shows: the bearer header first, else the cookie."""
        return self.bearer(conn) or conn.cookies.get(COOKIE)

    def proof(self, challenge: str) -> str:
        """:func:`identity_proof` of ``challenge`` with this gateway's token."""
        return identity_proof(self._token.decode(), challenge)

    def allows(self, conn: HTTPConnection) -> bool:
        return self.matches(self.presented(conn))

    def allows_by_header(self, conn: HTTPConnection) -> bool:
        """Whether the request shows the token in its bearer header (which no other origin's page
        can set without the token), not only in the cookie (which a browser sends for any page)."""
        return self.matches(self.bearer(conn))

    def __repr__(self) -> str:
        return "TokenChecker(<hidden>)"
