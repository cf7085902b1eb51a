"""Helpers for tests: wait for things on the bus, never sleep."""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import nats

from jidocode.services.registry import SERVICES
from jidocode.shared import subjects
from jidocode.shared.bus import Bus, connect_nats, gather
from jidocode.shared.config import Config
from jidocode.shared.natsserver import NatsServer


async def ping_services(nc: nats.aio.client.Client, wait: float = 0.3) -> dict[str, list[dict[str, Any]]]:
    """Scatter-gather ``$SRV.PING``: replies grouped by micro service name."""
    found: dict[str, list[dict[str, Any]]] = {}
    for msg in await gather(nc, subjects.srv("PING"), wait=wait):
        info = json.loads(msg.data)
        found.setdefault(info["name"], []).append(info)
    return found


async def wait_for_services(
    config: Config, names: Iterable[str] = SERVICES, timeout: float = 20.0
) -> dict[str, list[dict[str, Any]]]:
    """Return once every named service answers ``$SRV.PING``; fail after ``timeout``."""
    wanted = {subjects.SERVICE_NAMES[n] for n in names}
    nc = await connect_nats(config, "tests", wait=False)  # as the config's user, if it has one
    try:

        async def _loop() -> dict[str, list[dict[str, Any]]]:
            while True:
                found = await ping_services(nc)
                if wanted <= set(found):
                    return found

        return await asyncio.wait_for(_loop(), timeout)
    finally:
        await nc.close()


@asynccontextmanager
async def private_bus(store: Path, name: str) -> AsyncIterator[Bus]:
    """A Bus on a nats-server of the caller's own (store under ``store``): for tests that change
    stream or bucket limits, which must not reach other tests' shared server."""
    server = await asyncio.to_thread(NatsServer(store_dir=store, sync="default").start)
    bus = await Bus.connect(Config(nats_url=server.url), name)
    try:
        yield bus
    finally:
        await bus.close()
        await asyncio.to_thread(server.stop)


def count_scandir(monkeypatch: Any) -> list[int]:
    """Make ``os.scandir`` record how many entries each call reads (bounds are checked in
    entries read, not in seconds, so they hold on a loaded machine); the list fills as it runs."""
    read: list[int] = []
    scandir = os.scandir

    def counting(path: str) -> list[os.DirEntry[str]]:
        entries = list(scandir(path))
        read.append(len(entries))
        return entries

    monkeypatch.setattr(os, "scandir", counting)
    return read
