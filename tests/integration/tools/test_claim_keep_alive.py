"""A running claim outlives the records' TTL: it is rewritten while the call runs, so a request sent
again for a long call waits for its result instead of claiming the key anew and running it twice."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from jidocode.services.tool_runner.idempotency import Claim, Ledger
from jidocode.shared.bus import Bus
from jidocode.shared.events.tools import ToolResult
from tests.helpers import private_bus

TTL = 1.2  # the records' time to live in this test (the smallest the bucket takes well)


async def _lifetime() -> float:
    return 60.0


@pytest.fixture
async def own_bus(tmp_path: Path) -> AsyncIterator[Bus]:
    """A server of this test's own: limits set here must not reach other tests."""
    async with private_bus(tmp_path / "js", "keep-alive-test") as bus:
        yield bus


async def test_a_call_longer_than_the_ttl_keeps_its_claim(own_bus: Bus) -> None:
    ledger = await Ledger.open(own_bus, ttl=TTL)
    claim = Claim.of("p1", "long-1", "bash", {"command": "sleep 5"}, "c1")
    assert await ledger.claim(claim, _lifetime) is None  # ours to run
    renewals = 0
    renewed_twice = asyncio.Event()
    watcher = await ledger.kv.watch(claim.key)

    async def count() -> None:
        nonlocal renewals
        while True:
            update = await watcher.updates(timeout=30)  # type: ignore[no-untyped-call]
            if update is not None and update.value and json.loads(update.value).get("state") == "running":
                renewals += 1
                if renewals >= 3:  # the claim itself, then two renewals: past two TTLs
                    renewed_twice.set()

    counting = asyncio.create_task(count())
    finish = asyncio.Event()

    async def long_call() -> ToolResult:
        await finish.wait()
        return ToolResult(ok=True, data="ran once")

    running = asyncio.create_task(ledger.settle(claim, long_call()))
    try:
        await asyncio.wait_for(renewed_twice.wait(), 30)
        # the call has run longer than the TTL: a request sent again finds the claim and waits
        again = asyncio.create_task(ledger.claim(claim, _lifetime))
        finish.set()
        assert (await asyncio.wait_for(running, 30)).data == "ran once"
        redelivered = await asyncio.wait_for(again, 30)
        assert redelivered is not None and redelivered.data == "ran once"  # not None: not run again
    finally:
        counting.cancel()
        finish.set()
        await asyncio.gather(counting, running, return_exceptions=True)
        await watcher.stop()  # type: ignore[no-untyped-call]
