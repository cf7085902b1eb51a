"""The egress proxy with real clients: curl (plain HTTP and a CONNECT tunnel) and Python's urllib
reach an allowed host through the proxy variables of a pass; a denied host, a name resolving to
127.0.0.1, the runtime's own port, a private address no entry names, and a request without a
live token are refused, each decision a ``tool.network`` event.

A web server on this machine's LAN address stands in for the internet; the test names map to it
through the proxy's resolver table (``/etc/hosts`` is never touched).
"""

from __future__ import annotations

import asyncio
import base64
import shutil
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import pytest
import pytest_asyncio

from jidocode.shared.egress import (
    PROXY_USER,
    CallScope,
    EgressProxy,
    LazyProxy,
    Pass,
    domains_opener,
    table_resolver,
)
from jidocode.shared.events.tools import ToolNetwork
from jidocode.shared.policy import Policy
from tests.integration.egress.support import Internet, internet, lan_address

pytestmark = pytest.mark.asyncio(loop_scope="module")

LAN = lan_address()
#: The port the test declares as the runtime's own (NATS): refused on any private address.
RUNTIME_PORT = 4222


@dataclass
class World:
    web: Internet
    policy: Policy
    events: list[ToolNetwork] = field(default_factory=list)
    seen: asyncio.Event = field(default_factory=asyncio.Event)
    proxy: EgressProxy | None = None
    grant: Pass | None = None

    async def sink(self, event: ToolNetwork, scope: CallScope) -> None:
        self.events.append(event)
        self.seen.set()

    async def event(self, host: str, outcome: str) -> ToolNetwork:
        """The first ``tool.network`` event of ``host`` with ``outcome`` (waited for)."""

        async def found() -> ToolNetwork:
            while True:
                for e in self.events:
                    if e.host == host and e.outcome == outcome:
                        return e
                self.seen.clear()
                await self.seen.wait()

        return await asyncio.wait_for(found(), 30)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def world(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[World]:
    if LAN is None:
        pytest.skip("this machine has no non-loopback address for the stand-in internet")
    if shutil.which("curl") is None:
        pytest.skip("curl is not installed")
    root = tmp_path_factory.mktemp("proj")
    policy = Policy.build(
        str(root),
        allow=["WebFetch(domain:pkg.test)", f"WebFetch(domain:{LAN}/32)"],
        allowed_domains=["local.test", "private.test"],
        denied_domains=["bad.test"],
    )
    names = {n: LAN for n in ("pkg.test", "bad.test", "other.test")}
    names["local.test"] = "127.0.0.1"
    names["private.test"] = "10.255.255.1"  # named by an entry, but no IP/CIDR entry covers it
    async with internet(LAN) as web:
        state = World(web, policy)
        proxy = await EgressProxy.start(
            resolver=table_resolver(names), runtime=[("127.0.0.1", RUNTIME_PORT)], on_event=state.sink
        )
        state.proxy = proxy
        try:
            async with proxy.grant(CallScope(project_id="p1", request_id="call-1", policy=policy)) as grant:
                state.grant = grant
                yield state
        finally:
            await proxy.close()


async def _run(world: World, *argv: str) -> tuple[int, str]:
    assert world.grant is not None
    env = {"PATH": "/usr/bin:/bin", **world.grant.env()}
    proc = await asyncio.create_subprocess_exec(
        *argv, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT
    )
    out, _ = await asyncio.wait_for(proc.communicate(), 60)
    return int(proc.returncode or 0), out.decode("utf-8", "replace")


async def _curl(world: World, *args: str) -> tuple[int, str]:
    """curl through the pass's proxy variables; its output ends with the HTTP status."""
    return await _run(world, "curl", "-sS", "-m", "30", "-w", "%{http_code}", *args)


async def test_curl_reaches_an_allowed_host_by_plain_http_and_by_connect(world: World) -> None:
    for tunnel in ([], ["-p"]):
        code, out = await _curl(world, *tunnel, world.web.url("pkg.test", "/plain"))
        assert code == 0 and out.startswith("hello pkg.test") and out.endswith("200"), out
    tunnel_closed = await world.event("pkg.test", "closed")
    assert tunnel_closed.bytes_down > 0 and tunnel_closed.bytes_up > 0
    assert (await world.event("pkg.test", "allowed")).address == world.web.address


async def test_python_urllib_reaches_an_allowed_host(world: World) -> None:
    url = world.web.url("pkg.test", "/plain")
    code, out = await _run(
        world, sys.executable, "-c", f"import urllib.request as u; print(u.urlopen({url!r}).read())"
    )
    assert code == 0 and "hello pkg.test" in out, out


@pytest.mark.parametrize(
    ("host", "why"),
    [
        ("bad.test", "deny by sandbox.denied_domains entry 'bad.test'"),
        ("other.test", "in no allowed entry"),
        ("local.test", "loopback address, always refused"),
        ("private.test", "private address, reached only when an allowed IP or CIDR entry names it"),
    ],
)
async def test_refused_destinations_answer_403_and_say_why(world: World, host: str, why: str) -> None:
    for tunnel in ([], ["-p"]):
        _, out = await _curl(world, *tunnel, world.web.url(host))
        assert "403" in out and "pkg" not in out, out
    assert why in (await world.event(host, "denied")).reason


async def test_the_runtimes_port_is_refused_on_an_allowed_address(world: World) -> None:
    server = await asyncio.start_server(lambda r, w: w.close(), host=world.web.address, port=RUNTIME_PORT)
    async with server:
        code, out = await _curl(world, "-p", f"http://pkg.test:{RUNTIME_PORT}/")
    assert code != 0 and "403" in out, out
    denied = [e for e in world.events if e.port == RUNTIME_PORT and e.outcome == "denied"]
    assert denied and "runtime's own endpoint" in denied[0].reason


async def test_a_request_without_a_live_token_is_407(world: World) -> None:
    assert world.proxy is not None
    bare = f"http://127.0.0.1:{world.proxy.tcp_port}"
    _, out = await _curl(world, "-x", bare, world.web.url("pkg.test", "/plain"))
    assert out.endswith("407"), out
    revoked = world.proxy.open_pass(CallScope(project_id="p1", request_id="gone", policy=world.policy))
    world.proxy.close_pass(revoked.token)
    _, out = await _curl(world, "-x", revoked.proxy_url(), world.web.url("pkg.test", "/plain"))
    assert out.endswith("407"), out


async def test_the_unix_socket_serves_the_same_proxy(world: World) -> None:
    assert world.proxy is not None and world.grant is not None
    reader, writer = await asyncio.open_unix_connection(world.proxy.unix_path)
    token = base64.b64encode(f"{PROXY_USER}:{world.grant.token}".encode()).decode()
    writer.write(
        f"GET {world.web.url('pkg.test', '/plain')} HTTP/1.1\r\nHost: pkg.test\r\n"
        f"Proxy-Authorization: Basic {token}\r\n\r\n".encode()
    )
    await writer.drain()
    answer = await asyncio.wait_for(reader.read(), 30)
    writer.close()
    assert answer.startswith(b"HTTP/1.1 200") and b"hello pkg.test" in answer


async def test_a_domains_pass_reaches_its_domains_only_and_deny_still_wins(world: World) -> None:
    """What the PRD service gives a provider CLI with ``use_login``: its declared domains, no more."""
    policy = Policy.build(world.policy.root, allowed_domains=[f"{LAN}/32"], denied_domains=["bad.test"])
    names = {n: world.web.address for n in ("pkg.test", "bad.test", "other.test")}
    lazy = LazyProxy(resolver=table_resolver(names))
    opener = domains_opener(lazy, project_id="p1", policy=policy)
    try:
        async with opener("prd/codex", ("pkg.test", "bad.test")) as egress:
            assert egress.proxy_url.startswith("http://jido:") and egress.port == (await lazy.get()).tcp_port
            for host, status in (("pkg.test", "200"), ("other.test", "403"), ("bad.test", "403")):
                url = world.web.url(host, "/plain")
                proc = await asyncio.create_subprocess_exec(
                    "curl", "-sS", "-m", "30", "-w", "%{http_code}", "-x", egress.url, url,
                    stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
                )  # fmt: skip
                out, _ = await asyncio.wait_for(proc.communicate(), 60)
                assert out.decode().endswith(status), (host, out)
    finally:
        await lazy.close()
