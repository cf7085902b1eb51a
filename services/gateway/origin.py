"""The gateway's own origin, and the two checks that keep other origins out (decision 0305).

A browser sends the session cookie with any request to the gateway, whichever page made it
(a page on another port of ``localhost`` is the same *site*, so ``SameSite=Strict`` does not
stop it). So a state-changing request (``POST``, ``PUT``, ``PATCH``, ``DELETE``) authenticated
by the cookie alone must show it comes from the gateway's own pages:

=======================================  =====================================================
request                                  answer
=======================================  =====================================================
``Authorization: Bearer <token>``        served (a page of another origin cannot set it)
cookie, ``Origin`` (else ``Referer``)    403 ``permission_denied`` naming the origin
not one of :attr:`OwnOrigin.origins`
cookie, own origin, ``Content-Type``     415 ``unsupported_media_type`` (a form or
not ``application/json``                 ``text/plain`` post: no preflight, so refused)
cookie, own origin, JSON                 served
=======================================  =====================================================

MCP over HTTP (``/projects/<p>/mcp``, any method) also needs a ``Host`` naming this gateway
(DNS rebinding) and, when there is an ``Origin``, one of its own: else 403, as the MCP
specification asks. The values are those of :class:`OwnOrigin`: the address the gateway
listens on (with ``localhost`` and the loopback addresses when it listens on loopback or on
every address) and each ``JIDO_GATEWAY_PUBLIC_URL``.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final
from urllib.parse import urlsplit

__all__ = [
    "STATE_CHANGING",
    "OwnOrigin",
    "Refusal",
    "is_mcp_path",
    "mcp_refusal",
    "parse_public_url",
    "state_change_refusal",
]

#: The methods that change state (the others are safe and not checked).
STATE_CHANGING: Final = frozenset({"POST", "PUT", "PATCH", "DELETE"})

#: The one body type a cookie-authenticated state change may have.
JSON_MEDIA_TYPE: Final = "application/json"

_DEFAULT_PORTS: Final = {"http": 80, "https": 443}
_LOOPBACK_NAMES: Final = ("localhost", "127.0.0.1", "[::1]")
_WILDCARDS: Final = frozenset({"", "0.0.0.0", "::"})
_MCP_PATH: Final = re.compile(r"^/projects/[^/]+/mcp/?$")


@dataclass(frozen=True)
class Refusal:
    """Why a request is refused: an HTTP status and the gateway's error body fields."""

    status: int
    error_type: str
    message: str
    details: dict[str, Any] = field(default_factory=dict)


def parse_public_url(url: str) -> tuple[str, str]:
    """``(origin, host)`` of a public URL such as ``https://jido.example.com``.

    The origin is ``scheme://host[:port]`` as a browser sends it (lower case, no default
    port); the host is the ``Host`` header a client sends for it. Raises ``ValueError`` for
    anything but an ``http``/``https`` URL with a host and no path, query or user.
    """
    parts = urlsplit(url.strip())
    scheme = parts.scheme.lower()
    if scheme not in _DEFAULT_PORTS or not parts.hostname:
        raise ValueError(f"public URL {url!r} must be http:// or https:// and name a host")
    if parts.path not in ("", "/") or parts.query or parts.fragment or parts.username or parts.password:
        raise ValueError(f"public URL {url!r} must be scheme://host[:port] only (no path, query or user)")
    try:
        port = parts.port
    except ValueError as exc:
        raise ValueError(f"public URL {url!r} has an invalid port: {exc}") from None
    host = _bracketed(parts.hostname.lower())
    netloc = host if port is None or port == _DEFAULT_PORTS[scheme] else f"{host}:{port}"
    return f"{scheme}://{netloc}", netloc


def _bracketed(host: str) -> str:
    return f"[{host}]" if ":" in host and not host.startswith("[") else host


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


@dataclass(frozen=True)
class OwnOrigin:
    """The ``Host`` and ``Origin`` values that name this gateway (all lower case)."""

    hosts: tuple[str, ...]
    origins: tuple[str, ...]

    @classmethod
    def of(cls, host: str, port: int, public_urls: Iterable[str] = ()) -> OwnOrigin:
        """The gateway listening on ``host``:``port`` (the real port, never 0), and its public URLs.

        A loopback or wildcard bind is also reached as ``localhost``, ``127.0.0.1`` and
        ``[::1]``; any other bind only by its own address (and the public URLs).
        """
        if not 0 < port < 65536:
            raise ValueError(f"the gateway's port must be the one it listens on (1-65535), got {port}")
        names: list[str] = []
        bind = host.strip().lower()
        if bind in _WILDCARDS or _is_loopback(bind):
            names.extend(_LOOPBACK_NAMES)
        if bind not in _WILDCARDS:
            names.append(_bracketed(bind))
        hosts: list[str] = []
        origins: list[str] = []
        for name in dict.fromkeys(names):
            hosts.append(f"{name}:{port}")
            origins.append(f"http://{name}:{port}")
            if port == _DEFAULT_PORTS["http"]:
                hosts.append(name)
                origins.append(f"http://{name}")
        for url in public_urls:
            origin, netloc = parse_public_url(url)
            hosts.append(netloc)
            origins.append(origin)
        return cls(hosts=tuple(dict.fromkeys(hosts)), origins=tuple(dict.fromkeys(origins)))

    def names_host(self, host: str | None) -> bool:
        return host is not None and host.strip().lower() in self.hosts

    def is_own(self, origin: str | None) -> bool:
        return origin is not None and origin.strip().lower().rstrip("/") in self.origins


def _origin_of_referer(referer: str) -> str | None:
    parts = urlsplit(referer)
    if not parts.scheme or not parts.netloc:
        return None
    return f"{parts.scheme}://{parts.netloc}"


def _media_type(content_type: str | None) -> str:
    return (content_type or "").split(";", 1)[0].strip().lower()


def state_change_refusal(
    own: OwnOrigin, method: str, headers: Mapping[str, str], *, bearer: bool
) -> Refusal | None:
    """Why a request that changes state may not be served (``None``: it may).

    ``headers`` are the request's, names in lower case; ``bearer`` says the request showed
    the token in its ``Authorization`` header (not only the cookie).
    """
    if method.upper() not in STATE_CHANGING or bearer:
        return None
    origin = headers.get("origin")
    source = "Origin"
    if origin is None and headers.get("referer"):
        origin, source = _origin_of_referer(headers["referer"]), "Referer"
    if not origin:
        return Refusal(
            403,
            "permission_denied",
            f"cross-site request refused: a {method.upper()} authenticated by the cookie must come from "
            "this gateway's own pages (it has no Origin or Referer header); "
            "scripts send Authorization: Bearer <token>",
            {"expected_origins": list(own.origins)},
        )
    if not own.is_own(origin):
        return Refusal(
            403,
            "permission_denied",
            f"cross-origin request refused: {source} {origin!r} is not this gateway's origin "
            f"({', '.join(own.origins)}); behind a proxy, set JIDO_GATEWAY_PUBLIC_URL",
            {"origin": origin, "expected_origins": list(own.origins)},
        )
    media_type = _media_type(headers.get("content-type"))
    if media_type != JSON_MEDIA_TYPE:
        return Refusal(
            415,
            "unsupported_media_type",
            f"a {method.upper()} authenticated by the cookie must send Content-Type: {JSON_MEDIA_TYPE}, "
            f"got {media_type or 'none'!r}",
            {"content_type": media_type, "expected": JSON_MEDIA_TYPE},
        )
    return None


def is_mcp_path(path: str) -> bool:
    """Whether ``path`` is a project's MCP endpoint (``/projects/<p>/mcp``)."""
    return _MCP_PATH.match(path) is not None


def mcp_refusal(own: OwnOrigin, headers: Mapping[str, str]) -> Refusal | None:
    """Why an MCP-over-HTTP request may not be served: a foreign ``Host`` or ``Origin`` (403)."""
    host = headers.get("host")
    if not own.names_host(host):
        return Refusal(
            403,
            "permission_denied",
            f"MCP request refused: Host {host!r} does not name this gateway ({', '.join(own.hosts)}); "
            "behind a proxy, set JIDO_GATEWAY_PUBLIC_URL",
            {"host": host, "expected_hosts": list(own.hosts)},
        )
    origin = headers.get("origin")
    if origin is not None and not own.is_own(origin):
        return Refusal(
            403,
            "permission_denied",
            f"MCP request refused: Origin {origin!r} is not this gateway's origin ({', '.join(own.origins)})",
            {"origin": origin, "expected_origins": list(own.origins)},
        )
    return None
