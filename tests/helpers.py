"""Helpers for tests: wait for things on the bus, never sleep."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterable

import nats

from jidocode.services.registry import SERVICES
from jidocode.shared import subjects
from jidocode.shared.config import Config


async def ping_services(nc: nats.aio.client.Client, wait: float = 0.3) -> dict[str, list[dict]]:
    """Scatter-gather ``$SRV.PING``: replies grouped by micro service name."""
    inbox = nc.new_inbox()
    found: dict[str, list[dict]] = {}
    sub = await nc.subscribe(inbox)
    await nc.publish(subjects.srv("PING"), b"", reply=inbox)
    try:
        while True:
            msg = await sub.next_msg(timeout=wait)
            info = json.loads(msg.data)
            found.setdefault(info["name"], []).append(info)
    except nats.errors.TimeoutError:
        pass
    finally:
        await sub.unsubscribe()
    return found


async def wait_for_services(
    config: Config, names: Iterable[str] = SERVICES, timeout: float = 20.0
) -> dict[str, list[dict]]:
    """Return once every named service answers ``$SRV.PING``; fail after ``timeout``."""
    wanted = {subjects.SERVICE_NAMES[n] for n in names}
    nc = await nats.connect(config.nats_url)
    try:

        async def _loop() -> dict[str, list[dict]]:
            while True:
                found = await ping_services(nc)
                if wanted <= set(found):
                    return found

        return await asyncio.wait_for(_loop(), timeout)
    finally:
        await nc.close()
