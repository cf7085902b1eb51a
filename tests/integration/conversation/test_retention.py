"""The conversation streams' retention: input goes after a day, the journal is never trimmed behind
a conversation's back (a size cap refuses new entries), events age out; all configurable."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import nats.js.errors
import pytest
from nats.js.api import DiscardPolicy

from jidocode.services.conversation.journal import ensure_streams
from jidocode.services.conversation.retention import GIB, StreamLimits
from jidocode.shared import subjects
from jidocode.shared.bus import Bus
from tests.helpers import private_bus


@pytest.fixture
async def own_bus(tmp_path: Path) -> AsyncIterator[Bus]:
    """A server of this test's own: limits set here must not reach other tests."""
    async with private_bus(tmp_path / "js", "retention-test") as bus:
        yield bus


def test_limits_from_the_environment() -> None:
    assert StreamLimits.from_env({}) == StreamLimits()
    limits = StreamLimits.from_env({"JIDO_INPUT_MAX_AGE_S": "60", "JIDO_JOURNAL_MAX_BYTES": "1048576"})
    assert limits.input_max_age_s == 60 and limits.journal_max_bytes == 1024 * 1024
    with pytest.raises(ValueError, match="JIDO_EVENTS_MAX_BYTES"):
        StreamLimits.from_env({"JIDO_EVENTS_MAX_BYTES": "-7"})
    with pytest.raises(ValueError, match="JIDO_INPUT_MAX_AGE_S"):
        StreamLimits.from_env({"JIDO_INPUT_MAX_AGE_S": "a day"})


async def test_streams_carry_the_default_limits(own_bus: Bus) -> None:
    await ensure_streams(own_bus)
    conv_in = (await own_bus.js.stream_info(subjects.STREAM_CONV_IN)).config
    assert conv_in.max_age == 24 * 3600 and conv_in.max_bytes == GIB and conv_in.discard == DiscardPolicy.OLD
    journal = (await own_bus.js.stream_info(subjects.STREAM_JOURNAL)).config
    assert not journal.max_age and journal.max_bytes == -1 and journal.discard == DiscardPolicy.NEW
    events = (await own_bus.js.stream_info(subjects.STREAM_EVENTS)).config
    assert events.max_age == 7 * 24 * 3600 and events.max_bytes == 8 * GIB


async def test_existing_streams_take_new_limits(own_bus: Bus) -> None:
    await ensure_streams(own_bus)  # as an older replica made them
    await ensure_streams(own_bus, limits=StreamLimits(input_max_age_s=3600, events_max_bytes=GIB))
    assert (await own_bus.js.stream_info(subjects.STREAM_CONV_IN)).config.max_age == 3600
    assert (await own_bus.js.stream_info(subjects.STREAM_EVENTS)).config.max_bytes == GIB


async def test_processed_input_ages_out(own_bus: Bus) -> None:
    await ensure_streams(own_bus, limits=StreamLimits(input_max_age_s=1))
    await own_bus.js.publish(subjects.conversation_in("p1", "c1"), b"old input")
    assert (await own_bus.js.stream_info(subjects.STREAM_CONV_IN)).state.messages == 1

    async def gone() -> None:
        # the server's expiry has no event to wait on: poll the count, bounded by wait_for
        while (await own_bus.js.stream_info(subjects.STREAM_CONV_IN)).state.messages:  # noqa: ASYNC110
            await asyncio.sleep(0.2)

    await asyncio.wait_for(gone(), 30)


async def test_a_full_journal_refuses_new_entries_and_keeps_the_old(own_bus: Bus) -> None:
    await ensure_streams(own_bus, limits=StreamLimits(journal_max_bytes=4096))
    subject = subjects.journal("p1", "c1")
    first = await own_bus.js.publish(subject, b"x" * 1000)
    with pytest.raises(nats.js.errors.APIError, match=r"(?i)maximum bytes"):
        for _ in range(10):
            await own_bus.js.publish(subject, b"y" * 1000)
    kept = await own_bus.js.get_msg(subjects.STREAM_JOURNAL, first.seq)
    assert kept.data == b"x" * 1000  # what was recorded stays
