"""A journal write the full disk drops is ``storage_full`` naming the store (issue 31, point 2).
A real nats-server on a small tmpfs (skipped with the reason where it cannot be mounted). That the
server takes writes again once space is freed is ``tests/integration/shared/test_storage.py``'s."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from jidocode.services.conversation.core import Signal
from jidocode.services.conversation.journal import Journal, ensure_streams
from jidocode.services.conversation.retention import StreamLimits
from jidocode.shared.bus import Bus
from jidocode.shared.config import Config
from jidocode.shared.errors import JidoError, RequestTimeout, StorageFull
from jidocode.shared.natsserver import NatsServer
from jidocode.shared.store_space import MIB, STORE_ENV
from tests.small_disk import fill, small_disk

P, C = "pfull", "cfull"
SMALL = StreamLimits(input_max_bytes=4 * MIB, events_max_bytes=4 * MIB)


def _step(n: int, size: int) -> list[Signal]:
    return [
        Signal(
            id=f"s{n}-{i}",
            type="conversation.user.message",
            source="t",
            data={"text": "x" * size},
            correlation_id=f"s{n}",
        )
        for i in range(4)
    ]


async def _append_until_refused(journal: Journal, last: int) -> tuple[JidoError, int]:
    """Append big steps until the disk refuses one; the error and the last stored sequence."""
    for n in range(200):
        try:
            last = await journal.append_many(P, C, _step(n, 60_000), expected_last=last)
        except JidoError as exc:
            return exc, last
    raise AssertionError("the disk never filled")


@pytest.mark.parametrize("named", [True, False], ids=["store-named-by-up", "store-unknown"])
async def test_a_write_the_full_disk_drops_is_storage_full_naming_the_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, named: bool
) -> None:
    with small_disk(tmp_path / "disk", "64m") as disk:
        store = disk / "js"
        store.mkdir()
        if named:
            monkeypatch.setenv(STORE_ENV, str(store))
        else:
            monkeypatch.delenv(STORE_ENV, raising=False)
        server = await asyncio.to_thread(NatsServer(store_dir=store, sync="always").start)
        bus = await Bus.connect(Config(nats_url=server.url), "storage-full-test")
        try:
            await ensure_streams(bus, limits=SMALL)
            journal = Journal(bus)
            filler = fill(disk, leave=2 * MIB)
            refused, _ = await _append_until_refused(journal, 0)
            if named:
                assert isinstance(refused, StorageFull) and refused.type == "storage_full"
                assert str(store) in refused.message and "free space on that disk" in refused.message.lower()
                assert refused.details["store"] == str(store) and refused.retryable
            else:  # a server this process cannot see: what it knows, a timeout
                assert isinstance(refused, RequestTimeout) and refused.type == "timeout"
            assert filler.exists()  # (`up`'s health watch heals the server once it is freed: test_storage.py)
        finally:
            await bus.close()
            await asyncio.to_thread(server.stop)
