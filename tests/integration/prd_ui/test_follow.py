"""The PRD follower on a real nats-server: one PRD's events in seq order from a given seq, each
once, live after stored; a clear error when there is no JIDO_PRD stream."""

from __future__ import annotations

import asyncio

import pytest
from nats.js.api import StreamConfig

from jidocode.cli.prd_follow import PrdFollower
from jidocode.shared import subjects
from jidocode.shared.bus import Bus
from jidocode.shared.config import Config
from jidocode.shared.errors import ServiceUnavailable
from jidocode.shared.events.prd import PrdAssistantText, PrdEvent, PrdLoopStateChanged

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
