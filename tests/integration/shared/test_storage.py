"""Issue 31, points 1 and 2: streams that fit the disk, a refused reservation said at once, and a
full disk that wedges the server only until `up`'s health watch restarts it."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from pathlib import Path

import nats
import nats.errors
import pytest
from nats.js import JetStreamContext
from nats.js.api import StreamConfig

from jidocode.cli.supervisor import supervise_nats
from jidocode.shared.bus import Bus
from jidocode.shared.config import Config
from jidocode.shared.errors import JidoError
from jidocode.shared.natsserver import NatsServer
from jidocode.shared.store_space import GIB, MIB, SERVER_SHARE, refusal, size_streams, stream_budget
from tests.small_disk import fill, small_disk


def test_streams_are_sized_from_the_free_space_within_what_the_server_grants() -> None:
    small = size_streams(2 * GIB)
    assert small.sizes == {"input": int(0.1 * GIB), "events": 512 * MIB, "prd": int(0.1 * GIB)}
    assert sum(small.sizes.values()) <= 2 * GIB * SERVER_SHARE
    assert refusal(small.sizes, 2 * GIB, Path("/store")) is None
    # a large disk keeps the former fixed sizes
    assert size_streams(1000 * GIB).sizes == {"input": GIB, "events": 8 * GIB, "prd": GIB}


def test_too_large_a_setting_is_refused_naming_the_disk_the_space_and_the_setting() -> None:
    said = refusal({"input": GIB, "events": 8 * GIB, "prd": GIB}, 2 * GIB, Path("/mnt/small/nats"))
    assert said is not None
    assert "/mnt/small/nats" in said and "10.0 GiB" in said and "1.5 GiB" in said
    assert "JIDO_EVENTS_MAX_BYTES=8589934592" in said


def test_the_budget_is_chosen_once_when_the_store_is_made(tmp_path: Path) -> None:
    with small_disk(tmp_path / "disk", "256m") as disk:
        store = disk / "nats"
        store.mkdir()
        first = stream_budget(store)
        assert first.sizes["events"] == int(first.free_bytes * 0.25)
        fill(disk, leave=64 * MIB)  # the disk fills up: the store keeps its sizes
        assert stream_budget(store) == first


async def test_a_reservation_the_server_refuses_is_storage_full_at_once(tmp_path: Path) -> None:
    with small_disk(tmp_path / "disk", "64m") as disk:
        server = await asyncio.to_thread(NatsServer(store_dir=disk / "js", sync="default").start)
        bus = await Bus.connect(Config(nats_url=server.url), "storage-test")
        try:
            with pytest.raises(JidoError) as refused:
                await bus.ensure_stream("BIG", ["big.>"], max_bytes=60 * MIB)
            assert refused.value.type == "storage_full" and not refused.value.retryable
            assert "no room for stream BIG" in refused.value.message
            assert "insufficient storage resources available" in refused.value.message
            assert "JIDO_EVENTS_MAX_BYTES" in refused.value.message
        finally:
            await bus.close()
            await asyncio.to_thread(server.stop)


async def test_a_full_disk_is_survived_by_the_log_reader_and_healed_by_a_restart(tmp_path: Path) -> None:
    with small_disk(tmp_path / "disk", "64m") as disk:
        (disk / "js").mkdir()
        budget = stream_budget(disk / "js")  # as `jidocode up` runs it
        server = NatsServer(
            store_dir=disk / "js", sync="always", monitor_port=0, max_file_store=budget.server_max_bytes
        )
        await asyncio.to_thread(server.start)
        stopping = asyncio.Event()
        watch = asyncio.create_task(supervise_nats(server, stopping))
        nc = await nats.connect(server.url, max_reconnect_attempts=-1, reconnect_time_wait=0.2)
        try:
            js = nc.jetstream()
            await js.add_stream(StreamConfig(name="S", subjects=["s.>"]))
            first = server.process.pid if server.process else None
            filler = fill(disk, leave=100_000)
            with contextlib.suppress(nats.errors.Error, TimeoutError):
                for _ in range(100):  # the write that meets the full disk breaks the stream
                    await js.publish("s.a", b"x" * 20_000, timeout=2)
            # the watch sees the broken stream through /healthz and restarts the server
            await _until(lambda: server.process is not None and server.process.pid != first, 60)
            filler.unlink()
            await _publishes(js, 30)  # within 30 s of the space coming back, no person needed
        finally:
            stopping.set()
            await watch
            await nc.close()
            await asyncio.to_thread(server.stop)


async def test_a_log_file_that_refuses_every_write_does_not_stop_the_log_reader(tmp_path: Path) -> None:
    # /dev/full: every write fails with ENOSPC, as a log file on a full disk does
    server = NatsServer(store_dir=tmp_path / "js", sync="default", log_file=Path("/dev/full"))
    await asyncio.to_thread(server.start)  # "Server is ready" was read after the failed writes
    try:
        pump = server.log_pump
        assert pump is not None and pump.lost > 0 and "No space left on device" in pump.lost_reason
        assert any("Server is ready" in line for line in server.log_tail)
        nc = await nats.connect(server.url)  # and the server, whose stderr is still read, serves
        await nc.jetstream().add_stream(StreamConfig(name="S", subjects=["s.>"]))
        await nc.close()
    finally:
        await asyncio.to_thread(server.stop)


async def _until(predicate: Callable[[], bool], timeout: float) -> None:
    async def loop() -> None:
        # a process's pid has no event to wait on: poll it, bounded by wait_for
        while not predicate():  # noqa: ASYNC110
            await asyncio.sleep(0.1)

    await asyncio.wait_for(loop(), timeout)


async def _publishes(js: JetStreamContext, timeout: float) -> None:
    async def loop() -> None:
        while True:
            try:
                await js.publish("s.a", b"back", timeout=2)
            except (nats.errors.Error, TimeoutError):
                await asyncio.sleep(0.5)  # the server is restarting: ask again
                continue
            return

    await asyncio.wait_for(loop(), timeout)
