"""The PRD follower on a real nats-server: one PRD's events in seq order from a given seq, each
once, live after stored; a clear error when there is no JIDO_PRD stream."""

from __future__ import annotations

import asyncio

import nats.js.errors
import pytest
from nats.js.api import StreamConfig

from jidocode.cli.prd_follow import PrdFollower
from jidocode.shared import subjects
from jidocode.shared.bus import Bus
from jidocode.shared.config import Config
from jidocode.shared.envelope import encode
from jidocode.shared.errors import ServiceUnavailable
from jidocode.shared.events.prd import PrdAssistantText, PrdEvent, PrdLoopStateChanged
from jidocode.shared.prd_stream import RESUME_MARGIN, start_sequence

DEADLINE = 30.0


def _text(prd: str, seq: int) -> PrdAssistantText:
    return PrdAssistantText(project_id="p1", prd=prd, seq=seq, text=f"{prd} {seq}")


async def _publish(bus: Bus, event: PrdEvent) -> None:
    await bus.js_publish(subjects.prd_event("p1", event.prd, event.type), event)


async def _take(follower: PrdFollower, count: int) -> list[PrdEvent]:
    got: list[PrdEvent] = []

    async def take() -> None:
        async for event in follower:
            got.append(event)
            if len(got) == count:
                return

    await asyncio.wait_for(take(), DEADLINE)
    return got


async def test_the_follower_gives_one_prds_events_after_a_seq_then_live(bus: Bus, config: Config) -> None:
    with pytest.raises(ServiceUnavailable, match="no JIDO_PRD stream"):
        await PrdFollower(bus, "p1", "auth").start()
    await bus.js.add_stream(StreamConfig(name=subjects.STREAM_PRD, subjects=[subjects.prd_event_filter()]))
    for seq in range(1, 6):
        await _publish(bus, _text("auth", seq))
        await _publish(bus, _text("other", seq))  # another PRD of the project: never shown
    await _publish(bus, _text("auth", 3))  # a repeat (a service that published twice): shown once

    async with PrdFollower(bus, "p1", "auth", after_seq=2, buffer=2, poll_s=0.2) as follower:
        stored = await _take(follower, 3)
        assert [(e.prd, e.seq) for e in stored] == [("auth", 3), ("auth", 4), ("auth", 5)]
        assert await follower.next() is None  # nothing new: the wait ends after poll_s
        live = PrdLoopStateChanged(
            project_id="p1", prd="auth", seq=6, from_state="running", to_state="completed"
        )
        await _publish(bus, live)
        assert await _take(follower, 1) == [live]
        assert follower.last_seq == 6

    other = await Bus.connect(config, "test-closed")
    follower = await PrdFollower(other, "p1", "auth", after_seq=6, poll_s=0.2).start()
    await other.nc.close()
    with pytest.raises(ServiceUnavailable, match="lost the connection to NATS"):
        await follower.next()

    with pytest.raises(ValueError, match="buffer"):
        PrdFollower(bus, "p1", "auth", buffer=0)
    with pytest.raises(ValueError, match="after_seq"):
        PrdFollower(bus, "p1", "auth", after_seq=-1)


async def test_the_start_of_a_seq_is_found_in_the_stream(bus: Bus) -> None:
    """The binary search lands on the PRD's event just after the resume point (minus the margin),
    between other PRDs' events; before the margin it is the stream's start, past the end the next."""
    with pytest.raises(nats.js.errors.NotFoundError):
        await start_sequence(bus.js, "p1", "auth", 500)
    await bus.js.add_stream(StreamConfig(name=subjects.STREAM_PRD, subjects=[subjects.prd_event_filter()]))
    position: dict[int, int] = {}  # the PRD's seq -> its stream sequence
    for seq in range(1, 301):
        for prd in ("auth", "other", "third")[: 1 + seq % 3]:
            payload, headers = encode(bus.envelope(_text(prd, seq)))
            ack = await bus.js.publish(
                subjects.prd_event("p1", prd, "prd.assistant_text"), payload, headers=headers
            )
            if prd == "auth":
                position[seq] = ack.seq
    last = max(position.values())
    for after in (1, 63, 64, 65, 100, 150, 299):
        start = await start_sequence(bus.js, "p1", "auth", after)
        target = after - RESUME_MARGIN
        expected = 1 if target <= 0 else position[target] + 1
        assert start == expected, after
        exact = await start_sequence(bus.js, "p1", "auth", after, margin=0)
        assert position[after] < exact <= position[after + 1], after
    assert await start_sequence(bus.js, "p1", "auth", 300, margin=0) == last + 1
    assert await start_sequence(bus.js, "p1", "auth", 10_000, margin=0) > last  # only new ones
    assert await start_sequence(bus.js, "p1", "nosuch", 100, margin=0) == 1  # nothing of it: from the start

    async with PrdFollower(bus, "p1", "auth", after_seq=250, poll_s=0.2) as follower:
        got = await _take(follower, 50)
    assert [e.seq for e in got] == list(range(251, 301))
