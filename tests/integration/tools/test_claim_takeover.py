"""A call whose tool runner died before it began runs once on the next replica; one that began is lost.

The claim says whether its call began (``started``, set by a compare-and-set just before it runs).
A request sent again for a dead replica's claim that never started takes it over and runs the call
once; the dead replica's call, should it wake up, can no longer begin (its compare-and-set fails)
and stores nothing. A call that began is reported ``outcome_unknown``, as before: its side effect
may have happened. Two ledgers on one real KV bucket stand for the two replicas.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from jidocode.services.tool_runner.idempotency import Claim, Ledger, TakenOver
from jidocode.shared.bus import Bus
from jidocode.shared.events.tools import ToolResult
from tests.helpers import private_bus

#: The claim lifetime in these tests: a replica silent for longer is gone.
LIFETIME = 0.5


async def _lifetime() -> float:
    return LIFETIME


@pytest.fixture
async def own_bus(tmp_path: Path) -> AsyncIterator[Bus]:
    async with private_bus(tmp_path / "js", "takeover-test") as bus:
        yield bus


async def _ledgers(bus: Bus) -> tuple[Ledger, Ledger]:
    dead = await Ledger.open(bus)
    dead.instance = "tool_runner/dead"
    alive = await Ledger.open(bus)
    alive.instance = "tool_runner/next"
    return dead, alive


async def test_a_call_that_never_began_runs_once_on_the_next_replica(own_bus: Bus) -> None:
    dead, alive = await _ledgers(own_bus)
    claim = Claim.of("p1", "r-1", "bash", {"command": "echo x >> out"}, "c1")
    assert await dead.claim(claim, _lifetime) is None  # claimed, then waiting for a quota slot: killed
    ran: list[str] = []

    async def call() -> ToolResult:
        await alive.begin(claim)
        ran.append("next")
        return ToolResult(ok=True, data="ran on the next replica")

    assert await asyncio.wait_for(alive.claim(claim, _lifetime), 30) is None  # taken over: ours to run
    result = await alive.settle(claim, call())
    assert result.data == "ran on the next replica" and ran == ["next"]

    # the first replica was only stalled: its call may not begin now, and it stores nothing
    async def late() -> ToolResult:
        await dead.begin(claim)
        ran.append("dead")
        return ToolResult(ok=True, data="ran twice")

    stale = await dead.settle(claim, late())
    assert ran == ["next"] and stale.error is not None and stale.error.type == "outcome_unknown"
    stored = json.loads((await alive.kv.get(claim.key)).value or b"{}")
    assert stored["state"] == "done" and stored["result"]["data"] == "ran on the next replica"
    # a request sent again gets the one result
    again = await alive.claim(claim, _lifetime)
    assert again is not None and again.data == "ran on the next replica"


async def test_a_call_that_began_is_reported_lost_not_run_again(own_bus: Bus) -> None:
    dead, alive = await _ledgers(own_bus)
    claim = Claim.of("p1", "r-2", "bash", {"command": "echo y >> out"}, "c1")
    assert await dead.claim(claim, _lifetime) is None
    await dead.begin(claim)  # it began: its side effect may have happened, then the replica died
    answer = await asyncio.wait_for(alive.claim(claim, _lifetime), 30)
    assert answer is not None and answer.error is not None and answer.error.type == "outcome_unknown"
    assert answer.error.details == {"instance": "tool_runner/dead"}


async def test_begin_after_a_takeover_raises(own_bus: Bus) -> None:
    dead, alive = await _ledgers(own_bus)
    claim = Claim.of("p1", "r-3", "write_file", {"path": "a", "content": "b"}, "c1")
    assert await dead.claim(claim, _lifetime) is None
    assert await asyncio.wait_for(alive.claim(claim, _lifetime), 30) is None
    with pytest.raises(TakenOver):
        await dead.begin(claim)
    await alive.begin(claim)  # the new owner's own compare-and-set holds
