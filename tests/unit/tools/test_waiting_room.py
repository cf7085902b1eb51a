"""The waiting room of the tool runner's pipeline: waits hold no request slot, bounded per project."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import pytest

from jidocode.services.tool_runner.errors import QuotaExceeded
from jidocode.services.tool_runner.quotas import MAX_QUEUED_PER_PROJECT, WaitingRoom, queue_limit


@pytest.mark.parametrize(
    ("environ", "limit"),
    [
        ({}, MAX_QUEUED_PER_PROJECT),
        ({"JIDO_MAX_QUEUED_CALLS": ""}, MAX_QUEUED_PER_PROJECT),
        ({"JIDO_MAX_QUEUED_CALLS": "7"}, 7),
    ],
)
def test_queue_limit(environ: dict[str, str], limit: int) -> None:
    assert queue_limit(environ) == limit


@pytest.mark.parametrize("raw", ["0", "100001", "many", "1.5"])
def test_a_bad_queue_limit_names_the_variable(raw: str) -> None:
    with pytest.raises(ValueError, match="JIDO_MAX_QUEUED_CALLS"):
        queue_limit({"JIDO_MAX_QUEUED_CALLS": raw})


def test_a_bad_limit_is_refused_at_construction() -> None:
    with pytest.raises(ValueError, match="1 … 100000"):
        WaitingRoom(limit=0)


class Slots:
    """A stand-in for ``ServiceHost.released``: records when the slot is given back and taken again."""

    def __init__(self) -> None:
        self.log: list[str] = []

    @contextlib.asynccontextmanager
    async def released(self) -> AsyncIterator[None]:
        self.log.append("given back")
        try:
            yield
        finally:
            self.log.append("taken again")


async def test_the_wait_gives_the_slot_back_and_takes_it_again() -> None:
    slots = Slots()
    room = WaitingRoom(release=slots.released, limit=2)
    async with room.wait("P", "a quota slot"):
        assert slots.log == ["given back"] and room.waiting("P") == 1
    assert slots.log == ["given back", "taken again"] and room.waiting("P") == 0 and room.total == 0


async def test_a_full_room_refuses_at_once_and_only_its_project() -> None:
    room = WaitingRoom(limit=2)
    inside, leave = asyncio.Event(), asyncio.Event()

    async def waiter() -> None:
        async with room.wait("P", "a quota slot"):
            if room.waiting("P") == 2:
                inside.set()
            await leave.wait()

    waiters = [asyncio.create_task(waiter()) for _ in range(2)]
    await asyncio.wait_for(inside.wait(), 10)
    with pytest.raises(QuotaExceeded) as refused:
        async with room.wait("P", "its MCP server to start"):
            pytest.fail("a third call of P entered a room for two")
    assert refused.value.retryable and refused.value.details == {
        "scope": "project (calls waiting)",
        "limit": 2,
    }
    assert "would wait for its MCP server to start, but 2 calls of its project wait already" in (
        refused.value.message
    )
    async with room.wait("Q", "a quota slot"):  # another project is not refused
        assert room.total == 3
    leave.set()
    await asyncio.gather(*waiters)
    assert room.total == 0


async def test_a_wait_that_fails_leaves_the_room() -> None:
    room = WaitingRoom(limit=1)
    with pytest.raises(QuotaExceeded):
        async with room.wait("P", "a quota slot"):
            raise QuotaExceeded("project", 1)
    async with room.wait("P", "a quota slot"):  # the place was freed
        assert room.waiting("P") == 1
