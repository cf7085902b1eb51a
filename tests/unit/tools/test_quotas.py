"""Quota accounting: which slots a call takes, bounded waits, wake-ups, interrupts (no bus)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from jidocode.services.tool_runner.call import Call
from jidocode.services.tool_runner.errors import CallCancelled, QuotaExceeded
from jidocode.services.tool_runner.quotas import Quotas, Slot, slots_for
from jidocode.shared.envelope import Envelope
from jidocode.shared.events.tools import RunTool, ToolCallMeta
from jidocode.shared.settings import ToolSettings

TOOLS = ToolSettings(max_concurrent_per_project=3, max_concurrent_per_conversation=2)
ONE = Slot("p:P", 1, "project")


def _call(conversation_id: str | None) -> Call:
    request = RunTool(name="bash", meta=ToolCallMeta(request_id="r", conversation_id=conversation_id))
    return Call.of("P", request, Envelope.new(request, source="test"))


def test_a_call_takes_its_project_then_its_conversation_slot() -> None:
    assert slots_for(_call("c1"), TOOLS) == (
        Slot("p:P", 3, "project"),
        Slot("c:P:c1", 2, "conversation"),
    )


def test_a_call_without_conversation_takes_the_project_slot_only() -> None:
    assert slots_for(_call(None), TOOLS) == (Slot("p:P", 3, "project"),)


async def _held(quotas: Quotas, slot: Slot, release: asyncio.Event, holding: asyncio.Event) -> None:
    async with quotas.slot(slot, 0):
        holding.set()
        await release.wait()


@pytest.fixture
async def full() -> AsyncIterator[tuple[Quotas, asyncio.Event]]:
    """A quota of one slot, held until the event is set."""
    quotas, release, holding = Quotas(), asyncio.Event(), asyncio.Event()
    holder = asyncio.create_task(_held(quotas, ONE, release, holding))
    await holding.wait()
    yield quotas, release
    release.set()
    await holder


async def test_full_quota_refuses_without_waiting(full: tuple[Quotas, asyncio.Event]) -> None:
    quotas, _ = full
    with pytest.raises(QuotaExceeded) as caught:
        async with quotas.slot(ONE, 0):
            pytest.fail("took a slot of a full quota")
    assert caught.value.type == "quota_exceeded" and caught.value.retryable
    assert caught.value.details == {"scope": "project", "limit": 1}
    assert "this project (limit 1)" in caught.value.message


async def test_full_quota_refuses_after_the_wait(full: tuple[Quotas, asyncio.Event]) -> None:
    quotas, _ = full
    with pytest.raises(QuotaExceeded):
        async with quotas.slot(ONE, 0.05, owner=("P", "late")):
            pytest.fail("took a slot of a full quota")
    assert quotas.queued == 0


async def test_a_freed_slot_wakes_the_waiter(full: tuple[Quotas, asyncio.Event]) -> None:
    quotas, release = full
    got = asyncio.Event()

    async def waiter() -> None:
        async with quotas.slot(ONE, 30, owner=("P", "w")):
            got.set()
            assert quotas.running("p:P") == 1

    task = asyncio.create_task(waiter())
    while not quotas.queued:  # noqa: ASYNC110  # the waiter reached the queue
        await asyncio.sleep(0)
    assert not got.is_set()
    release.set()
    await asyncio.wait_for(task, 5)
    assert got.is_set()
    assert quotas.running("p:P") == 0 and quotas.queued == 0


async def test_interrupt_stops_one_owners_wait(full: tuple[Quotas, asyncio.Event]) -> None:
    quotas, _ = full

    async def waiter(owner: tuple[str, str]) -> None:
        async with quotas.slot(ONE, 30, owner=owner):
            pass

    task = asyncio.create_task(waiter(("P", "w")))
    while not quotas.queued:  # noqa: ASYNC110
        await asyncio.sleep(0)
    quotas.interrupt(("P", "other"), CallCancelled())  # not waiting: nothing happens
    assert not task.done()
    quotas.interrupt(("P", "w"), CallCancelled())
    with pytest.raises(CallCancelled):
        await asyncio.wait_for(task, 5)
    assert quotas.queued == 0


async def test_hold_takes_every_slot_and_frees_them_all() -> None:
    quotas = Quotas()
    slots = slots_for(_call("c1"), TOOLS)
    async with quotas.hold(slots, 0, owner=("P", "r")):
        assert quotas.running("p:P") == 1 and quotas.running("c:P:c1") == 1
    assert quotas.running("p:P") == 0 and quotas.running("c:P:c1") == 0


async def test_hold_frees_the_first_slot_when_the_second_is_full() -> None:
    quotas = Quotas()
    tools = ToolSettings(max_concurrent_per_project=5, max_concurrent_per_conversation=1)
    slots = slots_for(_call("c1"), tools)
    async with quotas.hold(slots, 0, owner=("P", "a")):
        with pytest.raises(QuotaExceeded, match="conversation"):
            async with quotas.hold(slots, 0, owner=("P", "b")):
                pytest.fail("took a slot of a full quota")
        assert quotas.running("p:P") == 1  # b's project slot was given back
    assert quotas.running("p:P") == 0


async def test_a_cancelled_waiter_leaves_the_queue(full: tuple[Quotas, asyncio.Event]) -> None:
    quotas, release = full
    order: list[str] = []

    async def waiter(name: str) -> None:
        async with quotas.slot(ONE, 30, owner=("P", name)):
            order.append(name)

    first = asyncio.create_task(waiter("first"))
    while quotas.queued < 1:  # noqa: ASYNC110
        await asyncio.sleep(0)
    second = asyncio.create_task(waiter("second"))
    while quotas.queued < 2:  # noqa: ASYNC110
        await asyncio.sleep(0)
    first.cancel()
    with pytest.raises(asyncio.CancelledError):
        await first
    assert quotas.queued == 1
    release.set()
    await asyncio.wait_for(second, 5)
    assert order == ["second"]
    assert quotas.queued == 0 and quotas.running("p:P") == 0


async def test_the_limit_holds_after_a_hand_over(full: tuple[Quotas, asyncio.Event]) -> None:
    """The woken waiter's slot is counted: a newcomer does not run beside it."""
    quotas, release = full
    holding, done = asyncio.Event(), asyncio.Event()

    async def waiter() -> None:
        async with quotas.slot(ONE, 30, owner=("P", "w")):
            holding.set()
            await done.wait()

    task = asyncio.create_task(waiter())
    while not quotas.queued:  # noqa: ASYNC110
        await asyncio.sleep(0)
    release.set()
    await asyncio.wait_for(holding.wait(), 5)
    with pytest.raises(QuotaExceeded):
        async with quotas.slot(ONE, 0):
            pytest.fail("a second call ran beside the woken one")
    done.set()
    await task
    assert quotas.running("p:P") == 0
