"""Cluster-wide quotas over a real nats-server: the limit holds across tool-runner replicas, a
waiter on one replica gets a slot freed on another, a dead holder's slot comes back after its
lease, a live holder keeps it, a cancel stops a wait for a slot of the cluster, and a call answers
before its leases are freed."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from nats.aio.msg import Msg

from jidocode.services.tool_runner.errors import CallCancelled, QuotaExceeded
from jidocode.services.tool_runner.quota_leases import BUCKET_TOOL_QUOTAS, Lease, QuotaLeases, lease_key
from jidocode.services.tool_runner.quotas import Quotas, Slot
from jidocode.services.tool_runner.service import ToolRunner
from jidocode.shared.bus import Bus
from jidocode.shared.clients import ToolsClient
from jidocode.shared.config import Config
from jidocode.shared.events.tools import ToolResult
from tests.integration.tools.support import RunnerFactory, Signals, failure, run_tool, start_project

ONE = Slot("p:P", 1, "project")
SLEEPY = {"permissions": {"allow": ["Bash(sleep:*)", "Read"]}, "tools": {"max_concurrent_per_project": 1}}


async def _holding_a_slot(
    bus: Bus, runners: RunnerFactory, signals: Signals, root: Path, wait_s: float
) -> tuple[str, asyncio.Task[ToolResult], ToolRunner, ToolRunner]:
    """Replica A runs a long call of a project limited to one call at once; replica B starts after."""
    a = await runners(quota_wait_s=wait_s)
    pid = await start_project(bus, root, SLEEPY)
    first = asyncio.create_task(
        run_tool(bus, pid, "bash", {"command": "sleep 65"}, request_id="long", timeout=90)
    )
    started = await signals.wait(lambda e: e.type == "tool.started" and e.data["request_id"] == "long", 20)
    assert started.source == a.bus.source
    b = await runners(quota_wait_s=wait_s)
    return pid, first, a, b


async def _stop(bus: Bus, pid: str, first: asyncio.Task[ToolResult]) -> None:
    await ToolsClient(bus, pid).cancel("long")
    assert failure(await asyncio.wait_for(first, 30)).type == "cancelled"


async def test_the_project_limit_holds_across_replicas(
    bus: Bus, runners: RunnerFactory, signals: Signals, tmp_path: Path
) -> None:
    pid, first, _, b = await _holding_a_slot(bus, runners, signals, tmp_path, 0)
    # The queue group picks a replica at random: send calls until one reaches B. Each is refused,
    # on A by its own count, on B by the lease A holds (per-replica counting let B's run).
    for n in range(60):
        rid = f"other{n}"
        refused = failure(await run_tool(bus, pid, "list_dir", {}, request_id=rid))
        assert refused.type == "quota_exceeded" and refused.details == {"scope": "project", "limit": 1}
        failed = await signals.wait(
            lambda e, rid=rid: e.type == "tool.failed" and e.data["request_id"] == rid
        )
        if failed.source == b.bus.source:
            break
    else:
        pytest.fail("60 calls in a row went to the same replica")
    await _stop(bus, pid, first)
    assert (await run_tool(bus, pid, "list_dir", {}, request_id="after")).ok  # the slot is free again


async def test_a_waiter_on_another_replica_gets_the_freed_slot(
    bus: Bus, runners: RunnerFactory, signals: Signals, tmp_path: Path
) -> None:
    pid, first, a, b = await _holding_a_slot(bus, runners, signals, tmp_path, 120)
    assert a.pipeline is not None and b.pipeline is not None
    qa, qb = a.pipeline.quotas, b.pipeline.quotas

    async def queued(count: int) -> None:
        while qa.queued + qb.queued < count:  # noqa: ASYNC110  # white-box: the call reached a queue
            await asyncio.sleep(0.01)

    waiting: list[asyncio.Task[ToolResult]] = []
    while not qb.queued and len(waiting) < 30:  # until one waits on B
        rid = f"w{len(waiting)}"
        waiting.append(asyncio.create_task(run_tool(bus, pid, "list_dir", {}, request_id=rid, timeout=150)))
        await asyncio.wait_for(queued(len(waiting)), 20)
    assert qb.queued == 1, "30 calls in a row went to the same replica"
    on_b = f"w{len(waiting) - 1}"
    assert not [e for e in signals.seen if e.type == "tool.started" and e.data["request_id"] == on_b]
    await _stop(bus, pid, first)
    results = await asyncio.wait_for(asyncio.gather(*waiting), 60)
    assert all(r.ok for r in results), results
    ran = await signals.wait(lambda e: e.type == "tool.started" and e.data["request_id"] == on_b)
    assert ran.source == b.bus.source


@pytest.fixture
async def buses(config: Config) -> AsyncIterator[list[Bus]]:
    """Three tool-runner connections: replicas as far as the quota bucket can tell."""
    opened = [
        await Bus.connect(config.model_copy(update={"instance": f"q{i}"}), "tool_runner") for i in range(3)
    ]
    yield opened
    for b in opened:
        await b.close()


async def _leases(bus: Bus, lease_s: int) -> QuotaLeases:
    leases = await QuotaLeases.open(bus, lease_s=lease_s)
    assert leases is not None, "the test server has per-message TTLs"
    return leases


def _count(leases: QuotaLeases, method: str) -> list[object]:
    """Record the calls of ``leases``'s bucket watch (``watch``) or its writes (``write``)."""
    calls: list[object] = []
    owner: object = leases.kv if method == "watch" else leases
    real = getattr(owner, method)

    async def counting(*args: object, **kwargs: object) -> object:
        calls.append(args)
        return await real(*args, **kwargs)

    setattr(owner, method, counting)
    return calls


async def test_a_dead_holders_slot_comes_back_after_its_lease(buses: list[Bus]) -> None:
    lease_s = 2
    dead, alive = await _leases(buses[0], lease_s), await _leases(buses[1], lease_s)
    t0 = time.monotonic()
    held = await dead.take(ONE, 0)
    await buses[0].nc.close()  # the replica is gone: no renewal, no release
    taken = await alive.take(ONE, 60)
    # the server drops the key no sooner than the TTL after its last write (at or after t0)
    assert time.monotonic() - t0 >= lease_s - 0.5
    assert taken.key == held.key == lease_key(ONE, 0)
    await taken.release()
    await held.release()  # only stops its renewal loop: the connection is closed


async def test_a_live_holder_keeps_its_slot_past_the_lease(buses: list[Bus]) -> None:
    lease_s = 3
    holder, other = await _leases(buses[0], lease_s), await _leases(buses[1], lease_s)
    held = await holder.take(ONE, 0)
    watches, writes = _count(other, "watch"), _count(other, "write")
    try:
        with pytest.raises(QuotaExceeded):  # renewed every second: held past its lease
            await other.take(ONE, lease_s + 2)
        assert not held.lost
        # the waiter followed one watch per resync period and wrote nothing: it did not poll
        assert writes == [] and 1 <= len(watches) <= 3
    finally:
        await held.release()
    await (await other.take(ONE, 0)).release()  # a released slot is free at once


async def test_the_limit_holds_under_a_race_of_replicas(buses: list[Bus]) -> None:
    slot = Slot("p:race", 2, "project")
    replicas = [await _leases(b, 10) for b in buses]
    holding, most = 0, 0

    async def call(leases: QuotaLeases) -> None:
        nonlocal holding, most
        lease = await leases.take(slot, 120)
        holding += 1
        most = max(most, holding)
        await asyncio.sleep(0.02)  # hold it a moment, so the calls overlap
        holding -= 1
        await lease.release()

    await asyncio.wait_for(asyncio.gather(*(call(replicas[i % 3]) for i in range(18))), 150)
    assert most == slot.limit


async def test_a_cancel_stops_the_wait_for_a_slot_of_the_cluster(buses: list[Bus]) -> None:
    holder = await _leases(buses[0], 10)
    quotas = Quotas(await _leases(buses[1], 10))
    held: Lease = await holder.take(ONE, 0)

    async def waiter() -> None:
        async with quotas.slot(ONE, 120, owner=("P", "w")):
            pytest.fail("took the slot another replica holds")

    task = asyncio.create_task(waiter())
    try:
        while not quotas.queued:  # noqa: ASYNC110  # white-box: the call waits for the cluster's slot
            await asyncio.sleep(0.01)
        assert quotas.running("p:P") == 1  # this replica's tier was passed
        quotas.interrupt(("P", "w"), CallCancelled())
        with pytest.raises(CallCancelled):
            await asyncio.wait_for(task, 20)
        assert quotas.queued == 0 and quotas.running("p:P") == 0
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError, CallCancelled):
            await task
        await held.release()
    async with quotas.slot(ONE, 0):  # nothing was left behind: the freed slot is taken at once
        assert quotas.running("p:P") == 1


def _calls(leases: QuotaLeases, method: str) -> list[str]:
    """The keys of ``leases``'s bucket reads (``read``) or writes (``write``) from now on."""
    keys: list[str] = []
    real = getattr(leases.bucket, method)

    async def counting(key: str, *args: object) -> object:
        keys.append(key)
        return await real(key, *args)

    setattr(leases.bucket, method, counting)
    return keys


async def test_a_slot_freed_here_is_taken_again_in_one_write(buses: list[Bus]) -> None:
    slot = Slot("p:again", 3, "project")
    leases = await _leases(buses[0], 10)
    first = await leases.take(slot, 0)
    await first.release()
    reads, writes = _calls(leases, "read"), _calls(leases, "write")
    again = await leases.take(slot, 0)
    # the key it freed, on its marker's revision: no read first
    assert (again.key, reads, writes) == (first.key, [], [first.key])
    await again.release()


async def test_a_slot_freed_here_and_taken_elsewhere_is_not_taken_twice(buses: list[Bus]) -> None:
    here, there = await _leases(buses[0], 10), await _leases(buses[1], 10)
    await (await here.take(ONE, 0)).release()  # the one key, freed here: its marker remembered
    held = await there.take(ONE, 0)  # then taken by another replica
    try:
        with pytest.raises(QuotaExceeded):  # the remembered marker is not the key's last write
            await here.take(ONE, 0)
    finally:
        await held.release()
    taken = await here.take(ONE, 0)  # freed there: read, then taken here
    assert taken.key == lease_key(ONE, 0)
    await taken.release()


async def test_a_call_answers_before_its_quota_leases_are_freed(
    bus: Bus, runners: RunnerFactory, tmp_path: Path
) -> None:
    await runners()
    mark = "the-text-only-the-answer-carries"
    (tmp_path / "README.md").write_text(mark)
    pid = await start_project(bus, tmp_path, {"permissions": {"allow": ["Read"]}})
    order: list[str] = []
    freed = asyncio.Event()

    async def on(msg: Msg) -> None:  # every message the server routes, in the order it routes them
        if (
            msg.subject.startswith(f"$KV.{BUCKET_TOOL_QUOTAS}.")
            and (msg.headers or {}).get("KV-Operation") == "DEL"
        ):
            order.append("freed")
            if order.count("freed") == 2:
                freed.set()
        elif mark.encode() in msg.data:
            order.append("answer")

    sub = await bus.nc.subscribe(">", cb=on)
    await bus.nc.flush()
    try:
        # a call of a conversation: its project's slot and its conversation's
        args = {"path": "README.md"}
        result = await run_tool(bus, pid, "read_file", args, request_id="r1", conversation_id="c1")
        assert result.ok and mark in result.data["content"]
        await asyncio.wait_for(freed.wait(), 20)  # freed all the same, right after
    finally:
        await sub.unsubscribe()
    assert order == ["answer", "freed", "freed"]
