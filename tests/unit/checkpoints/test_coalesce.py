"""Snapshots of one project coalesce: every request gets one begun after it, never an older one."""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jidocode.services.tool_runner.checkpoints.coalesce import Coalesced


class Tree:
    """A tree whose state is a counter; a take reads it once it begins, then takes a while."""

    def __init__(self) -> None:
        self.state = 0
        self.gate: asyncio.Event = asyncio.Event()
        self.began: asyncio.Event = asyncio.Event()

    async def take(self) -> int:
        seen = self.state
        self.began.set()
        await self.gate.wait()
        return seen


async def test_requests_made_while_a_snapshot_runs_share_the_next_one() -> None:
    tree, snaps = Tree(), Coalesced[int]()
    first = asyncio.create_task(snaps.get(tree.take))
    await asyncio.wait_for(tree.began.wait(), 5)  # the first take read state 0, waits at the gate
    tree.state = 1  # a write after the first snapshot began
    later = [asyncio.create_task(snaps.get(tree.take)) for _ in range(10)]
    await asyncio.sleep(0)
    tree.gate.set()
    assert await first == 0
    assert await asyncio.gather(*later) == [1] * 10  # none got the older tree
    assert snaps.takes == 2  # eleven requests, two snapshots


async def test_an_error_reaches_the_waiters_of_that_take_and_the_next_take_runs() -> None:
    snaps = Coalesced[int]()
    calls = 0

    async def take() -> int:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise OSError("listing failed")
        return calls

    with pytest.raises(OSError, match="listing failed"):
        await snaps.get(take)
    assert await snaps.get(take) == 2


@settings(max_examples=30, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=3), min_size=1, max_size=25))
def test_every_request_gets_a_snapshot_begun_after_it(gaps: list[int]) -> None:
    async def run() -> None:
        snaps = Coalesced[int]()
        clock = 0

        async def take() -> int:
            began = clock
            for _ in range(2):
                await asyncio.sleep(0)
            return began

        async def request(at: int) -> tuple[int, int]:
            return at, await snaps.get(take)

        tasks = []
        for gap in gaps:
            for _ in range(gap):
                await asyncio.sleep(0)
            clock += 1
            tasks.append(asyncio.create_task(request(clock)))
        for asked_at, began in await asyncio.gather(*tasks):
            assert began >= asked_at  # the snapshot began at or after the request
        assert snaps.takes <= len(gaps)

    asyncio.run(run())
