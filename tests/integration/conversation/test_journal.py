"""The journal on JetStream: ordered appends, atomic batches, the ownership fence, reads."""

from __future__ import annotations

import pytest

from jidocode.services.conversation.core import Signal
from jidocode.services.conversation.journal import SMALL_BATCH, Journal, LostOwnership, ensure_streams
from jidocode.shared.bus import Bus

from ._support import P


def _entries(n: int, prefix: str) -> list[Signal]:
    return [
        Signal(
            id=f"{prefix}{i}",
            type="conversation.user.message",
            source="t",
            data={"text": str(i)},
            correlation_id=f"{prefix}{i}",
        )
        for i in range(n)
    ]


@pytest.mark.parametrize("atomic", [True, False])
async def test_append_read_and_fence(bus: Bus, atomic: bool) -> None:
    assert await ensure_streams(bus, events_max_age_s=60) is True  # the test server supports batches
    journal = Journal(bus, atomic=atomic)
    last = await journal.append_many(P, "j", _entries(3, "a"), expected_last=0)
    last = await journal.append_many(P, "j", _entries(700, "b"), expected_last=last)
    read, seq = await journal.read(P, "j")
    assert seq == last and [e.id for e in read] == [e.id for e in _entries(3, "a") + _entries(700, "b")]
    assert read[5] == _entries(700, "b")[2]
    # another writer moved the journal on: a stale owner's batch is refused whole
    await journal.append(P, "j", _entries(1, "other")[0], expected_last=last)
    with pytest.raises(LostOwnership):
        await journal.append_many(P, "j", _entries(5, "late"), expected_last=last)
    with pytest.raises(LostOwnership):
        await journal.append(P, "j", _entries(1, "late1")[0], expected_last=last)
    read, _ = await journal.read(P, "j")
    assert len(read) == 704 and not any(e.id.startswith("late") for e in read)
    assert await journal.read(P, "empty") == ([], 0)


async def test_a_small_batch_is_appended_entry_by_entry_still_fenced(bus: Bus) -> None:
    assert await ensure_streams(bus, events_max_age_s=60) is True
    journal = Journal(bus, atomic=True)
    small = _entries(SMALL_BATCH, "s")
    last = await journal.append_many(P, "small", small, expected_last=0)
    read, seq = await journal.read(P, "small")
    assert seq == last and [e.id for e in read] == [e.id for e in small]
    # a stale owner's small batch is refused at its first entry: nothing of it is stored
    await journal.append(P, "small", _entries(1, "other")[0], expected_last=last)
    with pytest.raises(LostOwnership):
        await journal.append_many(P, "small", _entries(2, "late"), expected_last=last)
    read, _ = await journal.read(P, "small")
    assert len(read) == SMALL_BATCH + 1 and not any(e.id.startswith("late") for e in read)
