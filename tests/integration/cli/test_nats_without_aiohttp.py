"""A CLI command that imports nats-py does not import aiohttp with it (decision 0312), and a
``ws://`` NATS URL still works: the websocket transport imports aiohttp when it first connects. Against a real
nats-server with its websocket listener on, in a fresh process."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from jidocode.shared.natsserver import NatsServer, free_port

pytestmark = pytest.mark.slow

_ROUND_TRIP = """
import asyncio, sys
from jidocode.cli.lazy import defer_aiohttp_in_nats

defer_aiohttp_in_nats()
print("nats after the call:", "nats" in sys.modules)
import nats
print("aiohttp after import:", "aiohttp" in sys.modules)

async def main(url):
    nc = await nats.connect(url, connect_timeout=30, max_reconnect_attempts=0)
    sub = await nc.subscribe("p4.echo")
    await nc.publish("p4.echo", b"over websocket")
    msg = await sub.next_msg(timeout=30)
    print("received:", msg.data.decode())
    await nc.close()
    print("aiohttp after a websocket connection:", "aiohttp" in sys.modules)

asyncio.run(main(sys.argv[1]))
"""


@pytest.fixture
def websocket_nats(tmp_path: Path) -> Iterator[str]:
    port = free_port()
    server = NatsServer(
        store_dir=tmp_path / "js", extra_config=f"websocket {{\n  port: {port}\n  no_tls: true\n}}"
    ).start()
    try:
        yield f"ws://127.0.0.1:{port}"
    finally:
        server.stop()


def test_a_websocket_url_works_with_nats_imported_without_aiohttp(websocket_nats: str) -> None:
    proc = subprocess.run(
        [sys.executable, "-c", _ROUND_TRIP, websocket_nats], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.splitlines() == [
        "nats after the call: False",
        "aiohttp after import: False",
        "received: over websocket",
        "aiohttp after a websocket connection: True",
    ]
