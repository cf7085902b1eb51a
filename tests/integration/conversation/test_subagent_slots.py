"""Sub-agent slots over a real nats-server: the project's limit across replicas, a child finds
the slot it holds, and a release frees only the slot its child still holds."""

from __future__ import annotations

import asyncio

from jidocode.services.conversation.subagents.slots import BUCKET_SUBAGENT_SLOTS, SubagentSlots
from jidocode.shared.bus import Bus
from jidocode.shared.config import Config


async def test_the_limit_holds_across_replicas_and_a_child_finds_its_slot(bus: Bus, config: Config) -> None:
    peer = await Bus.connect(config.model_copy(update={"instance": "peer"}), "test")
    try:
        here, there = SubagentSlots(bus, limit=3, ttl_s=60), SubagentSlots(peer, limit=3, ttl_s=60)
        children = [f"c{i}" for i in range(8)]
        keys = await asyncio.gather(*((here, there)[i % 2].acquire("P", c) for i, c in enumerate(children)))
        taken = {c: k for c, k in zip(children, keys, strict=True) if k is not None}
        assert len(taken) == 3 and len(set(taken.values())) == 3
        assert await there.held("P") == {k: c for c, k in taken.items()}
        child, key = next(iter(taken.items()))
        assert await there.acquire("P", child) == key  # the call run again: the same slot
        await here.release("P", child)
        assert key not in await there.held("P")
        assert await there.acquire("P", "late") == key
    finally:
        await peer.close()


async def test_a_release_leaves_a_slot_another_child_holds_now(bus: Bus) -> None:
    slots = SubagentSlots(bus, limit=1, ttl_s=60)
    key = await slots.acquire("P", "old")
    assert key == "P.0"
    # the slot expired and another child took it (written here as another replica would)
    kv = await bus.kv(BUCKET_SUBAGENT_SLOTS)
    await kv.put(key, b"new")
    await slots.release("P", "old", key)  # the old child's end, late
    assert await slots.held("P") == {key: "new"}
    assert await slots.acquire("P", "third") is None
