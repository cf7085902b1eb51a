"""Who may use the gateway (issue 16 item 1) and how a viewer that does not keep up is cut off.

Only a bus and the gateway run here (no services are needed to refuse a request).
"""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
import pytest_asyncio

from jidocode.services.gateway.auth import COOKIE, load_or_create_token
from jidocode.services.gateway.service import GatewayServer, make_context
from jidocode.services.gateway.settings import GatewaySettings
from jidocode.shared.bus import Bus
from jidocode.shared.config import Config
from jidocode.shared.envelope import new_id
from jidocode.shared.natsserver import NatsServer
from tests.integration.gateway.conftest import until

pytestmark = [pytest.mark.slow, pytest.mark.asyncio(loop_scope="module")]

QUEUE = 4


class Bare:
    def __init__(self, server: GatewayServer, token: str, data_home: Path, bus: Bus) -> None:
        self.server, self.token, self.data_home, self.bus = server, token, data_home, bus


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def bare(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Bare]:
    base = tmp_path_factory.mktemp("gateway-auth")
    nats = await asyncio.to_thread(NatsServer(store_dir=base / "js", sync="default").start)
    bus = await Bus.connect(Config(nats_url=nats.url, jido_home=base / "home"), "gateway")
    data_home = base / "data"
    settings = GatewaySettings(host="127.0.0.1", port=0, data_home=data_home, sse_queue=QUEUE)
    server = GatewayServer(make_context(bus, bus_config(nats.url, base), settings))  # token generated
    await server.start()
    try:
        yield Bare(server, load_or_create_token(data_home), data_home, bus)
    finally:
        await server.stop()
        await bus.close()
        await asyncio.to_thread(nats.stop)


def bus_config(url: str, base: Path) -> Config:
    return Config(nats_url=url, jido_home=base / "home")


PROTECTED = [
    ("GET", "/api/projects"),
    ("POST", "/api/projects"),
    ("GET", "/openapi.json"),
    ("GET", "/api/events"),
    ("GET", "/api/projects/p1/conversations/c1/events"),
    ("POST", "/api/projects/p1/conversations/c1/messages"),
    ("GET", "/"),
]


async def test_every_route_but_health_needs_the_token(bare: Bare, tmp_path: Path) -> None:
    other_deployment = load_or_create_token(tmp_path)  # a real token, of another data home
    assert other_deployment != bare.token
    async with httpx.AsyncClient(base_url=bare.server.base_url, timeout=30) as http:
        health = await http.get("/healthz")
        assert health.status_code == 200 and health.json() == {"status": "ok"}
        for method, path in PROTECTED:
            for headers in (
                {},
                {"Authorization": "Bearer wrong"},
                {"Authorization": f"Bearer {other_deployment}"},
                {"Authorization": f"Basic {bare.token}"},
                {"Cookie": f"{COOKIE}={other_deployment}"},
            ):
                response = await http.request(method, path, headers=headers, json={"text": "x"})
                assert response.status_code == 401, (method, path, headers)
                body = response.json()
                assert body["error"]["type"] == "unauthorized" and body["error"]["message"]
                for secret in (
                    bare.token,
                    other_deployment,
                    str(bare.data_home),
                    str(tmp_path),
                    "/api",
                ):
                    assert secret not in response.text, (path, secret)
                assert "set-cookie" not in response.headers
                assert response.headers["www-authenticate"] == "Bearer"
        # the right token opens the door (a 404 is past the check)
        ok = await http.get("/openapi.json", headers={"Authorization": f"Bearer {bare.token}"})
        assert ok.status_code == 200 and ok.json()["openapi"].startswith("3.")
        cors = await http.options(
            "/api/projects",
            headers={"Origin": "https://evil.example", "Access-Control-Request-Method": "GET"},
        )
        assert "access-control-allow-origin" not in cors.headers  # CORS is off by default


async def test_login_sets_a_strict_http_only_cookie(bare: Bare) -> None:
    async with httpx.AsyncClient(base_url=bare.server.base_url, timeout=30) as http:
        wrong = await http.get("/login", params={"token": "x" * 40})
        assert wrong.status_code == 401 and "x" * 40 not in wrong.text and "set-cookie" not in wrong.headers
        assert (await http.get("/login")).status_code == 401
        response = await http.get("/login", params={"token": bare.token})
        assert response.status_code == 303 and response.headers["location"] == "/"
        cookie = response.headers["set-cookie"]
        assert cookie.startswith(f"{COOKIE}={bare.token};")
        assert "HttpOnly" in cookie and "SameSite=strict" in cookie.replace("Strict", "strict")
        # the client keeps the cookie: the API answers with no header
        assert (await http.get("/openapi.json")).status_code == 200


async def _raw_sse(
    bare: Bare, path: str, port: int | None = None
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """An SSE request on a socket with a small receive buffer, read only when the test says so."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.setblocking(False)
    await asyncio.get_running_loop().sock_connect(sock, ("127.0.0.1", port or bare.server.port))
    reader, writer = await asyncio.open_connection(sock=sock, limit=4096)
    writer.write(
        f"GET {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {bare.token}\r\nAccept: text/event-stream\r\nConnection: close\r\n\r\n".encode()
    )
    await writer.drain()
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 30)
    assert head.startswith(b"HTTP/1.1 200"), head
    return reader, writer


async def test_a_bus_viewer_that_falls_behind_gets_a_final_overflow_error(bare: Bare) -> None:
    reader, writer = await _raw_sse(bare, "/api/events?type=test.*")
    try:
        publisher = bare.bus.nc
        count = 300
        for i in range(count):  # ~15 MB: more than the socket buffers hold, so the gateway's queue fills
            event = {"specversion": "1.0", "id": new_id(), "source": "test", "type": "test.big"}
            event["data"] = {"n": i, "blob": "x" * 50_000}
            await publisher.publish("jido.sig.test.big", json.dumps(event).encode())
        await publisher.flush()
        body = await asyncio.wait_for(
            reader.read(-1), 60
        )  # the stream ends by itself (and the connection with it)
    finally:
        writer.close()
    text = body.decode(errors="replace")
    delivered = text.count("event: test.big")
    assert 0 < delivered < count
    tail = text[text.index("event: error") :]
    data = json.loads(tail.split("data: ", 1)[1].splitlines()[0])
    assert data["error"]["type"] == "overflow" and str(QUEUE) in data["error"]["message"]
    assert "event: test.big" not in tail  # the error is the last message
    assert bare.server.ctx.streams.overflowed == 1


async def test_a_viewer_that_reads_nothing_is_cut_off_after_the_send_timeout(bare: Bare) -> None:
    settings = bare.server.ctx.settings.model_copy(update={"sse_queue": 100_000, "sse_send_timeout_s": 1.0})
    patient = GatewayServer(make_context(bare.bus, bare.server.ctx.config, settings))
    await patient.start()
    try:
        counters = patient.ctx.streams
        reader, writer = await _raw_sse(bare, "/api/events?type=test.*", port=patient.port)
        await until(lambda: counters.open == 1)
        for i in range(300):  # never overflows the queue: only the stuck socket can end the stream
            event = {"specversion": "1.0", "id": new_id(), "source": "test", "type": "test.big"}
            event["data"] = {"n": i, "blob": "x" * 50_000}
            await bare.bus.nc.publish("jido.sig.test.big", json.dumps(event).encode())
        await bare.bus.nc.flush()
        await until(lambda: counters.open == 0)  # cut off while the test still reads nothing
        body = await asyncio.wait_for(reader.read(-1), 60)
        writer.close()
        assert 0 < body.count(b"event: test.big") < 300 and b"event: error" not in body
        assert counters.overflowed == 0
    finally:
        await patient.stop()


async def test_a_body_over_the_limit_is_refused_before_it_is_read(bare: Bare) -> None:
    limit = bare.server.ctx.settings.max_body_bytes
    async with httpx.AsyncClient(base_url=bare.server.base_url, timeout=30) as http:
        headers = {"Authorization": f"Bearer {bare.token}"}
        response = await http.post("/api/projects", content=b"x" * (limit + 1), headers=headers)
    assert response.status_code == 413
    assert response.json()["error"] == {
        "type": "payload_too_large",
        "message": f"the request body is larger than the limit of {limit} bytes",
        "details": {"limit": limit},
    }
