"""Cluster quota leases without a bus: the key scheme, the choice of keys to try, the lease
setting, who may reach the bucket, and the two tiers of :class:`Quotas` over a double of the
leases port (the real adapter runs in tests/integration/tools/test_quotas_cluster.py)."""

from __future__ import annotations

import asyncio
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from jidocode.services.tool_runner.errors import CallCancelled, QuotaExceeded
from jidocode.services.tool_runner.quota_leases import (
    BUCKET_TOOL_QUOTAS,
    DEFAULT_LEASE_S,
    Known,
    free_keys,
    index_of,
    lease_filter,
    lease_key,
    lease_seconds,
)
from jidocode.services.tool_runner.quotas import HeldLease, Quotas, Slot, cancel_and_wait
from jidocode.shared import nats_permissions as perms
from tests.deploy.natsutil import matches, may_publish

_KV_KEY = re.compile(r"^[-/_=.a-zA-Z0-9]+$")  # nats-py's valid key
ids = st.text(min_size=1, max_size=80)
slots = st.builds(
    Slot,
    key=ids,
    limit=st.integers(min_value=1, max_value=1024),
    scope=st.sampled_from(["project", "conversation"]),
)


@given(slot=slots, data=st.data())
def test_every_slot_has_valid_keys_under_its_own_filter(slot: Slot, data: st.DataObject) -> None:
    index = data.draw(st.integers(min_value=0, max_value=slot.limit - 1))
    key = lease_key(slot, index)
    assert _KV_KEY.match(key) and not key.startswith(".") and ".." not in key
    assert index_of(key) == index
    assert matches(lease_filter(slot), key)


@given(a=ids, b=ids)
def test_two_quotas_never_share_a_key(a: str, b: str) -> None:
    if a == b:
        return
    assert not matches(lease_filter(Slot(a, 4, "project")), lease_key(Slot(b, 4, "project"), 0))
    assert lease_filter(Slot(a, 4, "project")) != lease_filter(Slot(a, 4, "conversation"))


def test_a_lease_index_past_the_limit_is_refused() -> None:
    with pytest.raises(ValueError, match="index 3 is outside the quota's limit 3"):
        lease_key(Slot("p:P", 3, "project"), 3)
    assert index_of("project.abc.x") is None


@given(
    known=st.dictionaries(
        st.integers(min_value=0, max_value=12),
        st.builds(Known, revision=st.integers(min_value=1, max_value=10**6), held=st.booleans()),
    ),
    limit=st.integers(min_value=1, max_value=10),
)
def test_free_keys_are_the_unheld_ones_below_the_limit(known: dict[int, Known], limit: int) -> None:
    free = dict(free_keys(known, limit))
    for i in range(limit):
        if i not in known:
            assert free[i] == 0  # never written: created from nothing
        elif known[i].held:
            assert i not in free
        else:
            assert free[i] == known[i].revision  # deleted or expired: written over that revision
    assert all(i < limit for i in free)


@pytest.mark.parametrize(
    ("raw", "expected"),
    [(None, DEFAULT_LEASE_S), ("", DEFAULT_LEASE_S), ("2", 2), ("300", 300)],
)
def test_lease_setting(raw: str | None, expected: int) -> None:
    env = {} if raw is None else {"JIDO_TOOL_QUOTA_LEASE_S": raw}
    assert lease_seconds(env) == expected


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ("1", "JIDO_TOOL_QUOTA_LEASE_S=1 is outside 2 … 300 seconds"),
        ("301", "JIDO_TOOL_QUOTA_LEASE_S=301 is outside"),
        ("2.5", "JIDO_TOOL_QUOTA_LEASE_S='2.5' is not a whole number of seconds"),
        ("soon", "is not a whole number"),
    ],
)
def test_a_bad_lease_setting_is_named(raw: str, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        lease_seconds({"JIDO_TOOL_QUOTA_LEASE_S": raw})


@pytest.mark.parametrize(
    "subject",
    [
        f"$KV.{BUCKET_TOOL_QUOTAS}.project.abc.0",
        f"$JS.API.STREAM.INFO.KV_{BUCKET_TOOL_QUOTAS}",
        f"$JS.API.DIRECT.GET.KV_{BUCKET_TOOL_QUOTAS}.$KV.{BUCKET_TOOL_QUOTAS}.k",
        f"$JS.API.CONSUMER.CREATE.KV_{BUCKET_TOOL_QUOTAS}",
        f"$JS.API.STREAM.CREATE.KV_{BUCKET_TOOL_QUOTAS}",
    ],
)
def test_only_the_tool_runner_reaches_the_quota_leases(subject: str) -> None:
    # anybody else could fill a project's slots (no tool runs) or free them (the limit is gone)
    assert {u for u in perms.USERS if may_publish(u, subject)} == {"tool_runner"}


class _Lease:
    def __init__(self, leases: _MemoryLeases) -> None:
        self._leases = leases

    async def release(self) -> None:
        self._leases.held -= 1
        self._leases.changed.set()


class _MemoryLeases:
    """A double of the cluster tier: one shared count, as another replica would see it."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.held = 0
        self.taking = 0
        self.changed = asyncio.Event()

    async def take_at_once(self, slot: Slot) -> HeldLease | None:
        if self.held >= self.limit:
            return None
        self.held += 1
        return _Lease(self)

    async def take(self, slot: Slot, wait_s: float, *, tried: bool = False) -> HeldLease:
        self.taking += 1
        try:
            async with asyncio.timeout(wait_s):
                while self.held >= self.limit:
                    self.changed.clear()
                    await self.changed.wait()
        except TimeoutError:
            raise QuotaExceeded(slot.scope, slot.limit) from None
        finally:
            self.taking -= 1
        self.held += 1
        return _Lease(self)


async def test_a_slot_takes_this_replicas_count_then_the_clusters_and_frees_both() -> None:
    cluster = _MemoryLeases(1)
    quotas = Quotas(cluster)
    async with quotas.slot(Slot("p:P", 1, "project"), 0):
        assert quotas.running("p:P") == 1 and cluster.held == 1
    assert quotas.running("p:P") == 0 and cluster.held == 0


async def test_the_cluster_refusal_gives_this_replicas_slot_back() -> None:
    cluster = _MemoryLeases(1)
    cluster.held = 1  # another replica holds the only slot
    quotas = Quotas(cluster)
    with pytest.raises(QuotaExceeded):
        async with quotas.slot(Slot("p:P", 1, "project"), 0.05, owner=("P", "a")):
            pytest.fail("ran beside another replica's call")
    assert quotas.running("p:P") == 0 and quotas.queued == 0


async def test_an_interrupt_stops_the_clusters_wait() -> None:
    cluster = _MemoryLeases(1)
    cluster.held = 1
    quotas = Quotas(cluster)

    async def waiter() -> None:
        async with quotas.slot(Slot("p:P", 1, "project"), 60, owner=("P", "w")):
            pytest.fail("took the slot another replica holds")

    task = asyncio.create_task(waiter())
    while not cluster.taking:  # noqa: ASYNC110  # the call reached the cluster's wait
        await asyncio.sleep(0)
    assert quotas.queued == 1
    quotas.interrupt(("P", "w"), CallCancelled())
    with pytest.raises(CallCancelled):
        await asyncio.wait_for(task, 5)
    assert cluster.taking == 0 and cluster.held == 1  # the wait was stopped, nothing taken
    assert quotas.queued == 0 and quotas.running("p:P") == 0


async def test_a_cancelled_call_leaves_no_lease_behind() -> None:
    cluster = _MemoryLeases(1)
    cluster.held = 1
    quotas = Quotas(cluster)
    entered = asyncio.Event()

    async def waiter() -> None:
        async with quotas.slot(Slot("p:P", 1, "project"), 60, owner=("P", "w")):
            entered.set()

    task = asyncio.create_task(waiter())
    while not cluster.taking:  # noqa: ASYNC110
        await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert not entered.is_set() and cluster.taking == 0 and cluster.held == 1
    assert quotas.queued == 0 and quotas.running("p:P") == 0


async def test_a_task_that_swallows_a_cancel_is_cancelled_again() -> None:
    """As asyncio.wait_for does (CPython 3.11) when the cancel comes with the reply it awaited."""
    waiting, swallowed = asyncio.Event(), asyncio.Event()

    async def stubborn() -> str:
        try:
            waiting.set()
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            swallowed.set()  # the first cancel is lost: it goes on waiting
        await asyncio.Event().wait()
        return "never"

    task = asyncio.create_task(stubborn())
    await waiting.wait()
    assert await asyncio.wait_for(cancel_and_wait(task), 30) is None
    assert swallowed.is_set() and task.cancelled()


async def test_cancel_and_wait_hands_back_what_the_task_got() -> None:
    got = asyncio.Event()

    async def quick() -> str:
        got.set()
        return "lease"

    task = asyncio.create_task(quick())
    await got.wait()  # it set the event and returned in one step
    assert task.done()
    assert await cancel_and_wait(task) == "lease"
