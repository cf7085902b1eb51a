"""The bytes of the proxy protocol: a request head read and parsed, the proxy's own answers (pure).

Only what a forward proxy needs: ``CONNECT host:port`` and ``METHOD http://host[:port]/path``
requests, their headers (the ``Proxy-Authorization`` token among them), the head sent on to
the origin (origin-form target, the proxy's own headers removed, ``Connection: close``), and
the short plain-text answers the proxy gives itself (403, 407, 400, 502).
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass
from typing import Final
from urllib.parse import urlsplit

__all__ = ["MAX_HEAD", "REFUSED_HEADER", "Request", "answer", "origin_head", "parse_head", "split_authority"]

#: Marks the proxy's own answers (a refusal), so a client tells them from the origin's.
REFUSED_HEADER: Final = "X-Jido-Egress"
#: A request head longer than this is refused (the reader's limit).
MAX_HEAD: Final = 64 * 1024
#: Headers meant for the proxy itself or for one hop: never sent on to the origin (``Host`` is
#: written from the URL the decision was made on).
_HOP: Final = frozenset(
    {
        "proxy-authorization",
        "proxy-connection",
        "connection",
        "keep-alive",
        "te",
        "trailer",
        "upgrade",
        "host",
    }
)
_REASONS: Final = {
    400: "Bad Request",
    403: "Forbidden",
    407: "Proxy Authentication Required",
    502: "Bad Gateway",
}


@dataclass(frozen=True)
class Request:
    """One parsed request head."""

    method: str
    target: str
    version: str
    headers: tuple[tuple[str, str], ...]

    def header(self, name: str) -> str | None:
        wanted = name.lower()
        return next((v for k, v in self.headers if k.lower() == wanted), None)

    @property
    def token(self) -> str | None:
        """The password of ``Proxy-Authorization: Basic`` (the call's token), if any."""
        value = self.header("proxy-authorization") or ""
        scheme, _, encoded = value.partition(" ")
        if scheme.lower() != "basic":
            return None
        try:
            decoded = base64.b64decode(encoded.strip(), validate=True).decode("utf-8")
        except (binascii.Error, UnicodeDecodeError):
            return None
        _user, sep, password = decoded.partition(":")
        return password if sep and password else None


def parse_head(head: bytes) -> Request | str:
    """The request of ``head`` (up to and with the blank line), or what is wrong with it."""
    try:
        text = head.decode("latin-1")
    except UnicodeDecodeError:  # pragma: no cover - latin-1 decodes every byte
        return "undecodable request"
    lines = text.split("\r\n")
    parts = lines[0].split(" ")
    if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
        return f"not an HTTP/1.x request line: {lines[0][:100]!r}"
    headers: list[tuple[str, str]] = []
    for line in lines[1:]:
        if not line:
            continue
        name, sep, value = line.partition(":")
        if not sep or not name or name != name.strip():
            return f"malformed header line {line[:100]!r}"
        headers.append((name, value.strip()))
    return Request(method=parts[0].upper(), target=parts[1], version=parts[2], headers=tuple(headers))


def split_authority(authority: str, default_port: int | None = None) -> tuple[str, int] | str:
    """``host:port`` (``[v6]:port`` too) as its parts, or what is wrong with it."""
    try:
        parts = urlsplit(f"//{authority}")
        port = parts.port
    except ValueError as exc:
        return f"bad authority {authority[:100]!r}: {exc}"
    if not parts.hostname or parts.username is not None or parts.path or parts.query:
        return f"bad authority {authority[:100]!r}"
    if port is None and default_port is None:
        return f"{authority[:100]!r} names no port"
    return parts.hostname, port or default_port or 0


def origin_head(request: Request) -> tuple[str, int, bytes] | str:
    """An absolute-URI request as the origin's host, port and the head to send it, or why not."""
    try:
        url = urlsplit(request.target)
    except ValueError as exc:
        return f"bad URL: {exc}"
    if url.scheme != "http":
        return f"only http:// URLs are proxied as plain requests (use CONNECT for {url.scheme or 'this'})"
    where = split_authority(url.netloc, 80)
    if isinstance(where, str):
        return where
    path = url.path or "/"
    if url.query:
        path += "?" + url.query
    lines = [f"{request.method} {path} {request.version}", f"Host: {url.netloc}"]
    lines += [f"{k}: {v}" for k, v in request.headers if k.lower() not in _HOP]
    lines.append("Connection: close")
    return where[0], where[1], ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def answer(status: int, text: str, *, authenticate: bool = False) -> bytes:
    """The proxy's own short answer: ``status``, ``text`` as a plain-text body, then close."""
    body = (text.replace("\r", " ").replace("\n", " ") + "\n").encode("utf-8")
    head = [
        f"HTTP/1.1 {status} {_REASONS.get(status, 'Error')}",
        "Content-Type: text/plain; charset=utf-8",
        f"Content-Length: {len(body)}",
        "Connection: close",
        f"{REFUSED_HEADER}: refused",
    ]
    if authenticate:
        head.append('Proxy-Authenticate: Basic realm="jidocode"')
    return ("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + body
