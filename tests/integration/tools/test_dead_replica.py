"""A claim whose replica is gone is settled at once, not after its lifetime (issue 31, point 6).

Each claim names its replica by its ``nats.micro`` id; a request sent again for a claim held by
another replica asks ``$SRV.PING.jidocode-tool-runner.<id>``, and "no responders" (asked twice)
means the replica is gone: a call that never started runs here once, one that had started is
``outcome_unknown`` — both at once, where the claim's lifetime (here ten minutes) used to be
waited out. A replica that answers is waited for, as before; copies of one request waiting here
do not pile up (a newer copy takes over the older one's wait). Two ledgers on one real KV bucket
stand for the two replicas; the live one is a real micro service on the same server.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from nats.micro import add_service
from nats.micro.service import ServiceConfig

from jidocode.services.tool_runner.idempotency import Claim, Ledger
from jidocode.services.tool_runner.replicas import Replicas
from jidocode.shared import subjects
from jidocode.shared.bus import Bus
from jidocode.shared.events.tools import ToolResult
from tests.helpers import private_bus

#: The claims' lifetime here: far past every deadline of these tests (the old code waited it out).
LIFETIME = 600.0
#: How long a settlement may take on a loaded machine (a ping, its confirmation, a KV write or two).
DEADLINE = 30.0


async def _lifetime() -> float:
    return LIFETIME


@pytest.fixture
async def own_bus(tmp_path: Path) -> AsyncIterator[Bus]:
    async with private_bus(tmp_path / "js", "dead-replica-test") as bus:
        yield bus


async def _ledger(bus: Bus, instance: str, replica: str) -> Ledger:
    ledger = await Ledger.open(bus)
    ledger.instance = instance
    ledger.replicas = Replicas(bus.nc, replica, confirm_after=0.1)
    return ledger


async def test_a_started_call_of_a_gone_replica_is_reported_lost_at_once(own_bus: Bus) -> None:
    dead = await _ledger(own_bus, "tool_runner/dead", "DeadReplicaNobodyServes")
    claim = Claim.of("p1", "r-1", "bash", {"command": "echo y >> out"}, "c1")
    assert await dead.claim(claim, _lifetime) is None
    await dead.begin(claim)  # it began, then its replica died (nobody serves its micro id)
    alive = await _ledger(own_bus, "tool_runner/next", "NextReplica")
    answer = await asyncio.wait_for(alive.claim(claim, _lifetime), DEADLINE)
    assert answer is not None and answer.error is not None
    assert answer.error.type == "outcome_unknown" and answer.error.details["instance"] == "tool_runner/dead"


async def test_a_call_that_never_started_on_a_gone_replica_runs_here_at_once(own_bus: Bus) -> None:
    dead = await _ledger(own_bus, "tool_runner/dead", "DeadReplicaNobodyServes")
    claim = Claim.of("p1", "r-2", "bash", {"command": "echo x >> out"}, "c1")
    assert await dead.claim(claim, _lifetime) is None  # waiting for a quota slot when it died
    alive = await _ledger(own_bus, "tool_runner/next", "NextReplica")
    assert await asyncio.wait_for(alive.claim(claim, _lifetime), DEADLINE) is None  # ours to run, once

    async def call() -> ToolResult:
        await alive.begin(claim)
        return ToolResult(ok=True, data="ran on the next replica")

    assert (await alive.settle(claim, call())).data == "ran on the next replica"


async def test_a_live_replicas_call_is_waited_for_and_copies_do_not_pile_up(
    own_bus: Bus, monkeypatch: pytest.MonkeyPatch
) -> None:
    service = await add_service(
        own_bus.nc, ServiceConfig(name=subjects.SERVICE_NAMES["tool_runner"], version="0.0.1")
    )
    try:
        holder = await _ledger(own_bus, "tool_runner/holder", service.id)  # a live micro service
        claim = Claim.of("p1", "r-3", "bash", {"command": "sleep 1"}, "c1")
        assert await holder.claim(claim, _lifetime) is None
        await holder.begin(claim)
        other = await _ledger(own_bus, "tool_runner/other", "OtherReplica")
        other.supersede_after = 0.0  # any copy waiting already gives its wait to a newer one
        waiting = asyncio.Event()
        take_wait = other._take_wait

        def noted(key: str) -> asyncio.Event:
            waiting.set()
            return take_wait(key)

        monkeypatch.setattr(other, "_take_wait", noted)
        first = asyncio.ensure_future(other.claim(claim, _lifetime))
        await asyncio.wait_for(waiting.wait(), DEADLINE)  # the first copy waits for the holder
        # the copy sent after it takes over the wait: the first one's sender has moved on
        second = asyncio.ensure_future(other.claim(claim, _lifetime))
        old = await asyncio.wait_for(first, DEADLINE)
        assert old is not None and old.error is not None and old.error.type == "timeout"
        assert "newer copy" in old.error.message and not second.done()
        await holder.settle(claim, _done())
        answer = await asyncio.wait_for(second, DEADLINE)
        assert answer is not None and answer.data == "the holder's result"
    finally:
        await service.stop()


async def _done() -> ToolResult:
    return ToolResult(ok=True, data="the holder's result")
