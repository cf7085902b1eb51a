"""A push of ``prd finish`` to a network remote (decision 0343): which remotes, and git's pins (pure).

Only HTTP reaches the network, through the egress proxy: ``https://`` always, ``http://`` when
the user's ``prd.push.plain_http`` names the host. An ssh remote (``ssh://``, ``user@host:path``),
``git://`` and a transport program (``ext::``) are refused naming the host: the proxy speaks
HTTP, and ssh would need the user's keys in the sandbox.

The push's git gets, on top of the loop's pins: the one transport it uses, the proxy
(``http.proxy``, the pass's URL), no redirect (a redirect could point the request elsewhere),
TLS verified. A token (``prd.push.tokens``: host -> the name of the PRD service's variable) is
sent as ``http.<scheme>://<host>[:port]/.extraHeader`` (``Authorization: Basic``), which git
sends to that URL only; its value reaches git by standard input, never argv or a file.

A repository whose configuration sets ``http.*``, ``url.*`` (``insteadOf`` rewrites the URL)
or a URL-scoped ``credential.<url>.*`` is refused (:func:`steering_keys`): the project would
steer the push (another proxy, TLS off, a header cleared, a helper run) where the token goes.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final
from urllib.parse import urlsplit

from jidocode.shared.errors import InvalidInput, PermissionDenied
from jidocode.shared.policy.domains import normalize_host

from .config import PushSettings

__all__ = [
    "TOKEN_USER",
    "NetworkRemote",
    "auth_header",
    "is_network",
    "network_remote",
    "push_pins",
    "steering_keys",
]

#: The user name of the ``Authorization: Basic`` a token is sent as (GitHub's, accepted by
#: GitLab, Gitea and Bitbucket for a token used as a password).
TOKEN_USER: Final = "x-access-token"
#: ``[user@]host:path``: git's scp-like address (a colon before any slash).
_SCP_LIKE: Final = re.compile(r"^[^/:]+:")
_DEFAULT_PORTS: Final = {"https": 443, "http": 80}


@dataclass(frozen=True)
class NetworkRemote:
    """A remote reached over HTTP: the URL as configured, its host (normalized) and port, the
    base URL its header is scoped to, and the variable naming its token (``""``: anonymous)."""

    url: str
    scheme: str
    host: str
    port: int
    token_env: str = ""

    @property
    def base(self) -> str:
        """``scheme://host:port/``: what ``http.<url>.*`` keys match for this remote only."""
        return f"{self.scheme}://{self.host}:{self.port}/"


def is_network(url: str) -> bool:
    """Whether ``url`` names a remote over the network or a transport program (not a local path)."""
    scheme = urlsplit(url).scheme
    if scheme == "file":
        return False
    return "::" in url or len(scheme) > 1 or bool(_SCP_LIKE.match(url))


def _refused(url: str, host: str, why: str) -> PermissionDenied:
    return PermissionDenied(
        f"the remote {url!r} ({host or 'a transport program'}) {why}; push this one yourself (git push)",
        details={"url": url, "host": host},
    )


def network_remote(url: str, push: PushSettings) -> NetworkRemote:
    """The HTTP remote of ``url`` (:func:`is_network` is true), or ``PermissionDenied`` naming its
    host and why (not HTTP, plain http the user did not allow, credentials in the URL)."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise InvalidInput(f"the remote's URL {url!r} is not valid: {exc}", details={"url": url}) from None
    scheme = parts.scheme.lower()
    host = normalize_host(parts.hostname or "") or ""
    if scheme not in _DEFAULT_PORTS or "::" in url:
        shown = host or url.split("::", 1)[0].split(":", 1)[0].rpartition("@")[2]
        raise _refused(
            url,
            shown,
            "is not reached over HTTP: the PRD service's git reaches the network only through the "
            "egress proxy, which carries http(s) (ssh, git:// and transport programs are refused)",
        )
    if not host:
        raise InvalidInput(f"the remote's URL {url!r} names no host", details={"url": url})
    if parts.password is not None:
        raise _refused(url, host, "carries a password in its URL: name a token in prd.push.tokens instead")
    if scheme == "http" and host not in push.plain_http:
        raise _refused(
            url,
            host,
            "is plain http (unencrypted): a push uses it only when your prd.push.plain_http names "
            f"{host}; use https",
        )
    return NetworkRemote(
        url=url,
        scheme=scheme,
        host=host,
        port=port or _DEFAULT_PORTS[scheme],
        token_env=push.tokens.get(host, ""),
    )


def auth_header(remote: NetworkRemote, env: Mapping[str, str]) -> str:
    """``Authorization: Basic …`` of the remote's token (``""`` without one); ``InvalidInput``
    when the variable named is unset or empty in ``env`` (the PRD service's environment)."""
    if not remote.token_env:
        return ""
    token = env.get(remote.token_env, "")
    if not token or any(c in token for c in "\r\n\0"):
        raise InvalidInput(
            f"prd.push.tokens names ${remote.token_env} for {remote.host}, but the PRD service's "
            "environment has no usable value for it (set it where the services start)",
            details={"host": remote.host, "variable": remote.token_env},
        )
    basic = base64.b64encode(f"{TOKEN_USER}:{token}".encode()).decode("ascii")
    return f"Authorization: Basic {basic}"


def push_pins(remote: NetworkRemote, proxy_url: str) -> tuple[tuple[str, str], ...]:
    """The pins of the push's git on top of the loop's (which allow no transport)."""
    return (
        (f"protocol.{remote.scheme}.allow", "always"),
        ("http.proxy", proxy_url),
        ("http.followRedirects", "false"),
        ("http.sslVerify", "true"),
        ("push.recurseSubmodules", "no"),
        ("push.gpgSign", "false"),
        ("push.followTags", "false"),
    )


def steering_keys(listing: bytes) -> list[str]:
    """The keys of a ``git config --list --name-only -z`` listing that would steer a push:
    ``http.*``, ``url.*`` and ``credential.<url>.*`` (sorted, unique)."""
    out: set[str] = set()
    for raw in listing.split(b"\0"):
        name = raw.decode("utf-8", "surrogateescape").strip("\n")
        section, _, rest = name.partition(".")
        section = section.lower()
        if section in ("http", "url") or (section == "credential" and "." in rest):
            out.add(name)
    return sorted(out)
