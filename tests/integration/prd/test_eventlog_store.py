"""The PRD event writer and the loop records on a real nats-server (one server for the module).

The writer: gapless ``seq`` from the file's last line, the same ordered events in
``events.jsonl`` and on ``JIDO_PRD``, a torn last line cut, backpressure (a slow writer makes
``emit`` wait) with nothing dropped, a re-published last line not doubled. The records: one
loop per PRD (claim refused while one holds it, allowed once it ended), CAS on the revision,
expired leases found and taken over by exactly one of two contenders.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio

from jidocode.services.prd.eventlog import EventLog, ensure_stream, last_seq
from jidocode.services.prd.loop_rules import lease_lapsed
from jidocode.services.prd.store import LoopRecord, LoopStore, RunOptions, StaleRecord, lease_key
from jidocode.shared import subjects
from jidocode.shared.bus import Bus
from jidocode.shared.config import Config
from jidocode.shared.envelope import Envelope
from jidocode.shared.errors import Conflict
from jidocode.shared.events.prd import LoopInfo, PrdAssistantText, PrdLoopStateChanged
from jidocode.shared.lease import Held, Seen, Sightings
from jidocode.shared.natsserver import NatsServer

from .helpers import stream_events

pytestmark = pytest.mark.asyncio(loop_scope="module")

WAIT = 30.0


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def bus(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Bus]:
    server = NatsServer(store_dir=tmp_path_factory.mktemp("js"), sync="default").start()
    try:
        b = await Bus.connect(Config(nats_url=server.url, instance="test"), "prd")
        await ensure_stream(b)
        try:
            yield b
        finally:
            await b.close()
    finally:
        server.stop()


async def _stream_count(bus: Bus, project_id: str, prd: str) -> int:
    info = await bus.js.stream_info(
        subjects.STREAM_PRD, subjects_filter=subjects.prd_event_filter(project_id, prd)
    )
    return sum((info.state.subjects or {}).values())


def _lines(path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


async def test_events_are_numbered_written_and_published_in_order(bus: Bus, tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    log = await EventLog.open(bus, "p1", "order", path)
    for n in range(20):
        await log.emit(PrdAssistantText, story_id="US-001", text=f"chunk {n}")
    await log.close()
    lines = _lines(path)
    assert [line["data"]["seq"] for line in lines] == list(range(1, 21))  # type: ignore[index]
    published = await stream_events(bus, "p1", "order", 20)
    assert published == lines  # the same envelopes, the same order
    assert published[3]["id"] == "p1.order.4"

    # a new writer numbers on from the file's last line and re-publishes it (not doubled)
    log = await EventLog.open(bus, "p1", "order", path)
    event = await log.emit(PrdLoopStateChanged, from_state="running", to_state="paused")
    await log.close()
    assert event.seq == 21
    assert await _stream_count(bus, "p1", "order") == 21


async def test_seq_recovers_from_the_record_and_a_torn_line_is_cut(bus: Bus, tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    log = await EventLog.open(bus, "p1", "torn", path)
    await log.emit(PrdAssistantText, text="one")
    await log.emit(PrdAssistantText, text="two")
    await log.close()
    with path.open("ab") as f:
        f.write(b'{"specversion":"1.0","id":"p1.torn.3","data":{"se')  # the process died mid-write
    assert last_seq(path)[0] == 2
    assert path.read_bytes().endswith(b"\n")
    log = await EventLog.open(bus, "p1", "torn", path, record_seq=7)  # the record saw more
    event = await log.emit(PrdAssistantText, text="three")
    await log.close()
    assert event.seq == 8
    assert [line["data"]["seq"] for line in _lines(path)] == [1, 2, 8]  # type: ignore[index]


async def test_a_slow_writer_makes_emit_wait_and_nothing_is_dropped(bus: Bus, tmp_path: Path) -> None:
    gate = asyncio.Event()
    writing = asyncio.Event()

    async def slow_publish(subject: str, env: Envelope, message_id: str) -> None:
        writing.set()
        await gate.wait()
        await bus.js_publish(subject, env)

    path = tmp_path / "events.jsonl"
    log = EventLog(bus, "p1", "slow", path, queue_size=4, publish=slow_publish)
    log.start()
    for n in range(5):  # one in the writer's hands, four queued
        await log.emit(PrdAssistantText, text=f"{n}")
        if n == 0:
            await asyncio.wait_for(writing.wait(), WAIT)
    blocked = asyncio.create_task(log.emit(PrdAssistantText, text="5"))
    for _ in range(50):  # let the loop run: the emit must still be waiting for room
        await asyncio.sleep(0)
    assert not blocked.done()
    assert log.pending == 4
    gate.set()
    await asyncio.wait_for(blocked, WAIT)
    more = [log.emit(PrdAssistantText, text=f"{n}") for n in range(6, 40)]
    for emit in more:
        await emit
    await log.close()
    assert [line["data"]["text"] for line in _lines(path)] == [str(n) for n in range(40)]  # type: ignore[index]
    assert len(await stream_events(bus, "p1", "slow", 40)) == 40


def _record(prd: str, state: str = "running", owner: str = "a") -> LoopRecord:
    info = LoopInfo(project_id="p2", prd=prd, state=state, owner=owner)  # type: ignore[arg-type]
    return LoopRecord(info=info, options=RunOptions(provider="x"))


async def test_one_loop_per_prd_and_cas_on_every_write(bus: Bus) -> None:
    store = await LoopStore.open(bus)
    first = await store.claim(_record("one"))
    with pytest.raises(Conflict, match=r"'one' is running on a"):
        await store.claim(_record("one", owner="b"))
    paused = await store.put(first, _record("one", state="paused"))
    with pytest.raises(Conflict, match="paused"):
        await store.claim(_record("one", owner="b"))
    with pytest.raises(StaleRecord):  # written with the revision read before the pause
        await store.put(first, _record("one", state="stopped"))
    stopped = await store.put(paused, _record("one", state="stopped", owner=""))
    again = await store.claim(_record("one", owner="b"))  # a stopped loop's PRD can run again
    assert again.revision > stopped.revision
    got = await store.get("p2", "one")
    assert got is not None and got.record.info.owner == "b"
    assert {s.record.info.prd for s in await store.records("p2")} >= {"one"}


async def test_a_lapsed_lease_is_taken_over_by_one_replica(bus: Bus) -> None:
    store = await LoopStore.open(bus)
    now = [0.0]
    owner = store.leases(10.0, clock=lambda: now[0])
    records = {prd: await store.claim(_record(prd)) for prd in ("stale", "fresh", "released")}
    await store.claim(_record("parked", state="paused"))
    held = {prd: await owner.take(lease_key("p2", prd), "a") for prd in records}
    assert all(isinstance(h, Held) for h in held.values())
    running = {s.record.info.prd: s for s in await store.running()}
    # no paused record; no lease key (its value is no record: reading one as a record would fail)
    assert set(records) <= set(running) and "parked" not in running
    assert {*records, "parked"} <= {s.record.info.prd for s in await store.records("p2")}

    sightings = Sightings(10.0)

    async def sight(prd: str) -> Seen:
        seen = await owner.read(lease_key("p2", prd))
        return sightings.note(lease_key("p2", prd), seen.revision, seen.holder, now[0])

    def lapsed(prd: str, seen: Seen) -> bool:
        return lease_lapsed(seen, running[prd].revision, now[0], 10.0)

    assert not any([lapsed(prd, await sight(prd)) for prd in records])
    now[0] = 6.0
    fresh = held["fresh"]
    assert isinstance(fresh, Held) and isinstance(await owner.renew(fresh), Held)
    released = held["released"]
    assert isinstance(released, Held) and await owner.release(released)  # a clean stop: free at once
    assert lapsed("released", await sight("released"))
    now[0] = 12.0
    stale = await sight("stale")
    assert lapsed("stale", stale) and not lapsed("fresh", await sight("fresh"))

    b, c = store.leases(10.0, clock=lambda: now[0]), store.leases(10.0, clock=lambda: now[0])
    key = lease_key("p2", "stale")
    winners = await asyncio.gather(b.take(key, "b", stale), c.take(key, "c", stale))
    assert sum(isinstance(w, Held) for w in winners) == 1
    won = next(w for w in winners if isinstance(w, Held))
    taken = await store.take_over(running["stale"], won.holder)
    assert taken is not None and taken.record.info.owner == won.holder
    assert not lapsed("stale", await sight("stale"))  # the new owner's lease


async def test_a_lease_free_since_before_the_claim_waits_out_the_lease(bus: Bus) -> None:
    store = await LoopStore.open(bus)
    leases = store.leases(10.0)
    key = lease_key("p2", "new")
    earlier = await leases.take(key, "a")
    assert isinstance(earlier, Held) and await leases.release(earlier)  # a loop that ended
    claimed = await store.claim(_record("new"))  # the next one, its lease not taken yet
    seen = await leases.read(key)
    assert seen.holder is None and seen.revision < claimed.revision
    assert not lease_lapsed(seen, claimed.revision, seen.since, 10.0)
    assert lease_lapsed(seen, claimed.revision, seen.since + 10.5, 10.0)
