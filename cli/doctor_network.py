"""``jidocode doctor``'s ``network`` line: what a project's tool processes may reach, and whether
the egress proxy answers on this machine.

The allowlist is the project's effective one (``sandbox.allowed_domains`` / ``denied_domains``
of the settings and the ``WebFetch(domain:…)`` rules of its permissions, docs/network.md). The
proxy is tried in this process as the tool runner starts it (a unix socket and a loopback
port): a request without a token must be answered 407, a pass's ``CONNECT`` to loopback 403.
"""

from __future__ import annotations

import asyncio
import base64
import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

from jidocode.shared.errors import JidoError
from jidocode.shared.settings import global_home, load_settings

if TYPE_CHECKING:
    from jidocode.shared.policy import Policy

__all__ = ["allowlist_lines", "check_network", "proxy_self_test"]

_TIMEOUT_S = 10.0


def allowlist_lines(policy: Policy) -> list[str]:
    """The effective allowlist of ``policy``, one line per kind of entry."""
    net = policy.network.summary()
    lines = [
        f"allowed_domains: {', '.join(net['allowed_domains']) or 'none'}",
        f"denied_domains: {', '.join(net['denied_domains']) or 'none'}",
    ]
    for effect, rules in (("allow", policy.allow), ("ask", policy.ask), ("deny", policy.deny)):
        named = [r.raw for r in rules if r.kind == "domain"]
        if named:
            lines.append(f"{effect}: {', '.join(named)}")
    return lines


async def _status_of(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, head: str) -> str:
    writer.write(head.encode("latin-1"))
    await writer.drain()
    line = await asyncio.wait_for(reader.readline(), _TIMEOUT_S)
    writer.close()
    return line.decode("latin-1").strip()


async def proxy_self_test(policy: Policy) -> str | None:
    """Start a proxy as the tool runner does and ask it twice; ``None`` when both answers are right,
    else what went wrong."""
    from jidocode.shared.egress import PROXY_USER, CallScope, EgressProxy

    try:
        proxy = await EgressProxy.start()
    except OSError as exc:
        return f"the egress proxy cannot listen here: {exc}"
    try:
        bare = await _status_of(
            *await asyncio.open_connection("127.0.0.1", proxy.tcp_port),
            "CONNECT example.org:443 HTTP/1.1\r\n\r\n",
        )
        if " 407 " not in f"{bare} ":
            return f"a request without a token got {bare!r}, not 407"
        async with proxy.grant(CallScope(project_id="doctor", request_id="doctor", policy=policy)) as grant:
            auth = base64.b64encode(f"{PROXY_USER}:{grant.token}".encode()).decode()
            refused = await _status_of(
                *await asyncio.open_unix_connection(proxy.unix_path),
                f"CONNECT 127.0.0.1:9 HTTP/1.1\r\nProxy-Authorization: Basic {auth}\r\n\r\n",
            )
        if " 403 " not in f"{refused} ":
            return f"a CONNECT to loopback got {refused!r}, not 403"
    except (OSError, TimeoutError) as exc:
        return f"the egress proxy did not answer: {exc or 'timed out'}"
    finally:
        await proxy.close()
    return None


def check_network(project: str, *, home: Path | None = None) -> dict[str, Any]:
    """The ``network`` check: ``fail`` when the proxy does not answer, else ``ok`` (``warn`` when
    the settings cannot be read, or give the whole network without a proxy)."""
    from jidocode.shared.policy import policy_from_settings

    root = os.path.realpath(project)
    jido_home = global_home(home)
    loaded = load_settings(Path(root), jido_home=jido_home)
    try:
        policy = policy_from_settings(root, loaded, jido_home=str(jido_home))
    except JidoError as exc:
        return {"name": "network", "status": "warn", "detail": exc.message[:300], "fix": "see settings below"}
    lines = allowlist_lines(policy)
    # in a thread of its own: doctor may be called where an event loop already runs (a test's)
    with ThreadPoolExecutor(1) as pool:
        problem = pool.submit(asyncio.run, proxy_self_test(policy)).result()
    if problem is not None:
        fix = "tool processes get no network and web_fetch fails until the tool runner's proxy can listen"
        return {"name": "network", "status": "fail", "detail": problem, "fix": fix, "lines": lines}
    if loaded.settings.sandbox.network:
        detail = "sandbox.network is true: tool processes have the whole network, no proxy, no allowlist"
        fix = "remove sandbox.network from your settings to put the network under the allowlist"
        return {"name": "network", "status": "warn", "detail": detail, "fix": fix, "lines": lines}
    detail = f"egress proxy answers (unix socket and loopback port); allowlist of {root}:"
    return {"name": "network", "status": "ok", "detail": detail, "fix": None, "lines": lines}
