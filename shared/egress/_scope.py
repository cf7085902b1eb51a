"""Whose a connection is: the call a proxy token stands for, and the token handed to its programs.

A program reaches the proxy with the URL ``http://jido:<token>@127.0.0.1:<port>`` in its
``HTTP_PROXY``/``HTTPS_PROXY``/``ALL_PROXY``; curl, Python, pip, npm and git send the
token as ``Proxy-Authorization: Basic`` on every request and ``CONNECT``. The token maps to
one :class:`CallScope` (the project, conversation and call, its policy and how to ask its
user) for as long as the call runs; a connection without a live token is refused with 407.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Final

from jidocode.shared.policy import Decision, Policy
from jidocode.shared.policy.domains import DomainPattern
from jidocode.shared.sandbox import NO_PROXY

__all__ = ["PROXY_USER", "Asker", "CallScope", "Pass"]

#: The user name of the proxy URL (the token is its password: urllib sends only both).
PROXY_USER: Final = "jido"

#: Ask the call's user about one destination: ``(host, port, decision) -> approved``.
Asker = Callable[[str, int, Decision], Awaitable[bool]]


@dataclass(frozen=True)
class CallScope:
    """The call a token stands for, and what decides its connections.

    ``extra_allowed`` adds allowed entries for this call only (a PRD provider's API host);
    ``networks`` are IP/CIDR entries that let an allowed name resolve to a private address of
    theirs without allowing any host by themselves (the user's networks, for a provider's hosts);
    ``approved_hosts`` are hosts a human already approved for this call (a ``web_fetch`` whose
    ``ask`` was answered); ``ext`` the envelope extensions of its ``tool.network`` events.
    """

    project_id: str
    request_id: str
    policy: Policy
    conversation_id: str | None = None
    ask: Asker | None = None
    extra_allowed: tuple[DomainPattern, ...] = ()
    approved_hosts: frozenset[str] = frozenset()
    ext: dict[str, Any] = field(default_factory=dict)
    destinations: frozenset[tuple[str, int]] = frozenset()
    networks: tuple[DomainPattern, ...] = ()

    @property
    def effective_policy(self) -> Policy:
        """The policy with ``extra_allowed`` among its allowed entries."""
        if not self.extra_allowed:
            return self.policy
        return self.policy.model_copy(update={"network": self.policy.network.merged(self.extra_allowed)})


@dataclass(frozen=True)
class Pass:
    """A live token of the proxy: the URL and environment a call's programs use to reach it."""

    token: str
    tcp_port: int
    unix_path: str

    def proxy_url(self, *, host: str = "127.0.0.1", port: int | None = None) -> str:
        """``http://jido:<token>@host:port`` (``port``: the proxy's TCP port unless a bridge's)."""
        return f"http://{PROXY_USER}:{self.token}@{host}:{port or self.tcp_port}"

    def env(self, *, host: str = "127.0.0.1", port: int | None = None) -> dict[str, str]:
        """The proxy variables, both cases (programs read one or the other), ``NO_PROXY`` the
        loopback names: the sandbox's own rule (:data:`~jidocode.shared.sandbox.NO_PROXY`)."""
        url = self.proxy_url(host=host, port=port)
        out: dict[str, str] = {}
        for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY"):
            out[name] = out[name.lower()] = url
        out["NO_PROXY"] = out["no_proxy"] = NO_PROXY
        return out
