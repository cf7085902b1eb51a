"""How a call takes and frees the cluster's leases of its slots, over a double of the leases port
(decision 0349): tried at once, never waited for holding a later one, given back when the call
let go meanwhile, freed after the call's answer; and a conversation's quota that cannot bind is
not taken. The real adapter runs in tests/integration/tools/test_quotas_cluster.py."""

from __future__ import annotations

import asyncio

import pytest

from jidocode.services.tool_runner.call import Call
from jidocode.services.tool_runner.errors import CallCancelled, QuotaExceeded
from jidocode.services.tool_runner.quotas import HeldLease, Quotas, Slot, slots_for
from jidocode.shared.envelope import Envelope
from jidocode.shared.errors import ServiceUnavailable
from jidocode.shared.events.tools import RunTool, ToolCallMeta
from jidocode.shared.settings import ToolSettings

PROJECT = Slot("p:P", 8, "project")
CONVERSATION = Slot("c:P:c1", 4, "conversation")
OWNER = ("P", "r")


class _Lease:
    def __init__(self, cluster: _Cluster, key: str) -> None:
        self._cluster = cluster
        self._key = key

    async def release(self) -> None:
        self._cluster.releasing.set()
        await self._cluster.release_door.wait()
        self._cluster.out.remove(self._key)
        self._cluster.log.append(f"give {self._key}")
        self._cluster.freed_elsewhere(self._key)


class _Cluster:
    """A double of the cluster tier: free slots per quota key, as every replica sees them; the
    takes at once wait at ``door`` (open unless closed) and are counted while in flight."""

    def __init__(self, **free: int) -> None:
        self.free = {PROJECT.key: free.get("project", 8), CONVERSATION.key: free.get("conversation", 4)}
        self.log: list[str] = []
        #: The keys given out by this double and not given back, in the order taken.
        self.out: list[str] = []
        self.door = asyncio.Event()
        self.door.set()
        #: Where a give-back waits (open unless closed): a write NATS has not answered yet.
        self.release_door = asyncio.Event()
        self.release_door.set()
        self.releasing = asyncio.Event()
        #: Quota keys whose bucket is out of reach (their takes raise ``ServiceUnavailable``).
        self.unreachable: set[str] = set()
        self.in_flight = 0
        self.both_in_flight = asyncio.Event()
        self.waiting = asyncio.Event()
        self.changed = asyncio.Event()

    def _take(self, key: str) -> HeldLease | None:
        if self.free[key] <= 0:
            return None
        self.free[key] -= 1
        self.out.append(key)
        self.log.append(f"take {key}")
        return _Lease(self, key)

    async def take_at_once(self, slot: Slot) -> HeldLease | None:
        self.in_flight += 1
        if self.in_flight == 2:
            self.both_in_flight.set()
        try:
            await self.door.wait()
        finally:
            self.in_flight -= 1
        if slot.key in self.unreachable:
            raise ServiceUnavailable(f"the {slot.scope} quota could not be checked")
        return self._take(slot.key)

    async def take(self, slot: Slot, wait_s: float, *, tried: bool = False) -> HeldLease:
        self.log.append(f"wait {slot.key} holding {self.out}")
        self.waiting.set()
        try:
            async with asyncio.timeout(wait_s):
                while (lease := self._take(slot.key)) is None:
                    self.changed.clear()
                    await self.changed.wait()
        except TimeoutError:
            raise QuotaExceeded(slot.scope, slot.limit) from None
        return lease

    def freed_elsewhere(self, key: str) -> None:
        """A slot of ``key`` is free again (given back here, or by another replica)."""
        self.free[key] += 1
        self.changed.set()


async def test_the_leases_of_a_calls_slots_are_tried_at_once() -> None:
    cluster = _Cluster()
    cluster.door.clear()
    quotas = Quotas(cluster)
    taking = asyncio.create_task(quotas.take((PROJECT, CONVERSATION), 5, owner=OWNER))
    # both writes are out before either is answered (one round trip, not two)
    await asyncio.wait_for(cluster.both_in_flight.wait(), 10)
    cluster.door.set()
    held = await asyncio.wait_for(taking, 10)
    assert sorted(cluster.log) == [f"take {CONVERSATION.key}", f"take {PROJECT.key}"]
    assert quotas.running(PROJECT.key) == 1 and quotas.running(CONVERSATION.key) == 1
    await quotas.free(held)
    assert cluster.log[-2:] == [f"give {CONVERSATION.key}", f"give {PROJECT.key}"]  # in reverse
    assert cluster.out == [] and quotas.running(PROJECT.key) == 0


async def test_a_call_never_waits_for_its_project_holding_its_conversations_slot() -> None:
    cluster = _Cluster(project=0)  # other replicas hold the project's every slot
    quotas = Quotas(cluster)
    taking = asyncio.create_task(quotas.take((PROJECT, CONVERSATION), 30, owner=OWNER))
    await asyncio.wait_for(cluster.waiting.wait(), 10)
    # the conversation's lease, taken at once beside the project's, was given back before the wait
    assert cluster.log == [
        f"take {CONVERSATION.key}",
        f"give {CONVERSATION.key}",
        f"wait {PROJECT.key} holding []",
    ]
    cluster.freed_elsewhere(PROJECT.key)  # another replica frees a project slot
    held = await asyncio.wait_for(taking, 10)
    assert cluster.out == [PROJECT.key, CONVERSATION.key]  # then the conversation's again
    await quotas.free(held)
    assert cluster.out == []


async def test_a_refused_conversation_slot_keeps_the_project_one_while_it_waits() -> None:
    cluster = _Cluster(conversation=0)
    quotas = Quotas(cluster)
    with pytest.raises(QuotaExceeded):
        await quotas.take((PROJECT, CONVERSATION), 0.05, owner=OWNER)
    # the order of decision 0176: the project's slot is held while the conversation's is waited for
    assert f"wait {CONVERSATION.key} holding ['{PROJECT.key}']" in cluster.log
    assert cluster.out == [] and quotas.running(PROJECT.key) == 0 and quotas.queued == 0


async def test_a_quota_out_of_reach_fails_the_take_and_leaves_nothing_behind() -> None:
    cluster = _Cluster()
    cluster.unreachable.add(CONVERSATION.key)
    quotas = Quotas(cluster)
    with pytest.raises(ServiceUnavailable, match="conversation quota could not be checked"):
        await quotas.take((PROJECT, CONVERSATION), 5, owner=OWNER)
    await asyncio.wait_for(quotas.drain(), 10)
    # the project's lease, taken beside it, was given back: the limit fails closed, not stuck
    assert cluster.out == [] and cluster.log == [f"take {PROJECT.key}", f"give {PROJECT.key}"]
    assert quotas.running(PROJECT.key) == 0 and quotas.queued == 0


async def test_a_lease_taken_after_the_call_let_go_is_given_back() -> None:
    cluster = _Cluster()
    cluster.door.clear()
    quotas = Quotas(cluster)
    taking = asyncio.create_task(quotas.take((PROJECT, CONVERSATION), 5, owner=OWNER))
    await asyncio.wait_for(cluster.both_in_flight.wait(), 10)
    quotas.interrupt(OWNER, CallCancelled())  # cancelled while its writes are out
    with pytest.raises(CallCancelled):
        await asyncio.wait_for(taking, 10)
    assert quotas.running(PROJECT.key) == 0 and quotas.queued == 0
    cluster.door.set()  # the writes are answered: both leases were taken for a call that is gone
    await asyncio.wait_for(quotas.drain(), 10)
    assert cluster.out == [] and len(cluster.log) == 4  # taken, then given back


async def test_slots_freed_later_stay_busy_until_their_leases_are_given_back() -> None:
    cluster = _Cluster()
    quotas = Quotas(cluster)
    held = await quotas.take((PROJECT, CONVERSATION), 5, owner=OWNER)
    quotas.free_later(held)  # the caller answers now; the leases are given back after
    assert quotas.running(PROJECT.key) == 1 and cluster.out == [PROJECT.key, CONVERSATION.key]
    await asyncio.wait_for(quotas.drain(), 10)
    assert quotas.running(PROJECT.key) == 0 and quotas.running(CONVERSATION.key) == 0
    assert cluster.out == [] and cluster.log[-2:] == [f"give {CONVERSATION.key}", f"give {PROJECT.key}"]


async def test_a_free_cancelled_on_its_way_leaves_no_slot_behind() -> None:
    cluster = _Cluster()
    quotas = Quotas(cluster)
    held = await quotas.take((PROJECT, CONVERSATION), 5, owner=OWNER)
    cluster.release_door.clear()  # the conversation's give-back is not answered yet
    freeing = asyncio.create_task(quotas.free(held))
    await asyncio.wait_for(cluster.releasing.wait(), 10)  # the conversation's, first
    freeing.cancel()  # a stopping replica
    with pytest.raises(asyncio.CancelledError):
        await freeing
    # this replica's counts are free at once, the project's lease is given back in the background
    assert quotas.running(PROJECT.key) == 0 and quotas.running(CONVERSATION.key) == 0
    cluster.release_door.set()
    await asyncio.wait_for(quotas.drain(), 10)
    assert cluster.out == [CONVERSATION.key]  # the one whose write was cut short: it expires


def _call(conversation_id: str | None) -> Call:
    request = RunTool(name="bash", meta=ToolCallMeta(request_id="r", conversation_id=conversation_id))
    return Call.of("P", request, Envelope.new(request, source="test"))


@pytest.mark.parametrize("per_conversation", [8, 9])
def test_a_conversation_quota_that_cannot_bind_is_not_taken(per_conversation: int) -> None:
    # each call of the conversation holds one of the project's 8 slots: never more than 8 run
    tools = ToolSettings(max_concurrent_per_project=8, max_concurrent_per_conversation=per_conversation)
    assert slots_for(_call("c1"), tools) == (Slot("p:P", 8, "project"),)


def test_a_conversation_quota_below_its_projects_is_taken() -> None:
    tools = ToolSettings(max_concurrent_per_project=8, max_concurrent_per_conversation=7)
    assert slots_for(_call("c1"), tools) == (Slot("p:P", 8, "project"), Slot("c:P:c1", 7, "conversation"))
