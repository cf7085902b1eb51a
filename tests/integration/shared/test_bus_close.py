"""Closing a Bus always works, whatever the connection is doing."""

from __future__ import annotations

import asyncio
from pathlib import Path

from jidocode.shared.bus import Bus
from jidocode.shared.config import Config
from jidocode.shared.natsserver import NatsServer


async def test_close_while_reconnecting_closes(tmp_path: Path) -> None:
    server = await asyncio.to_thread(NatsServer(store_dir=tmp_path / "js", sync="default").start)
    try:
        bus = await Bus.connect(Config(nats_url=server.url), "close-test")
        await asyncio.to_thread(server.stop)

        async def reconnecting() -> None:
            # the client's state has no event to wait on: poll it, bounded by wait_for
            while not bus.nc.is_reconnecting:  # noqa: ASYNC110
                await asyncio.sleep(0.02)

        await asyncio.wait_for(reconnecting(), 20)
        await asyncio.wait_for(bus.close(), 20)  # drain would raise ConnectionReconnectingError
        assert bus.nc.is_closed
        await bus.close()  # and again: a no-op
    finally:
        server.stop()
