"""Sub-agents at once per project, over every replica: slots in the KV bucket ``jido_subagent_slots``.

Key ``<project_id>.<n>`` for ``n`` below the limit; each a lease of the shared primitive
(:mod:`jidocode.shared.lease`) whose holder is the child conversation's id. A start takes a
free slot by compare-and-set (so two replicas never take the same one) and the end deletes it
(compare-and-set too: a slot another child holds by then is left alone). A slot already
holding the same child (the parent's replica died and the call runs again) is taken again
by it. The bucket's entries expire after the sub-agent timeout plus a margin: a slot left
by a parent that was deleted mid-call frees itself; nothing renews a slot.
"""

from __future__ import annotations

import asyncio

from jidocode.shared import subjects
from jidocode.shared.bus import Bus
from jidocode.shared.lease import Held, LeaseBucket, Seen

__all__ = ["BUCKET_SUBAGENT_SLOTS", "SubagentSlots"]

BUCKET_SUBAGENT_SLOTS = subjects.BUCKET_SUBAGENT_SLOTS


class SubagentSlots:
    def __init__(self, bus: Bus, *, limit: int, ttl_s: float) -> None:
        self._bus = bus
        self.limit = limit
        self.ttl_s = ttl_s
        self._leases: LeaseBucket | None = None

    async def _bucket(self) -> LeaseBucket:
        if self._leases is None:
            self._leases = await LeaseBucket.open(
                self._bus, BUCKET_SUBAGENT_SLOTS, ttl_s=self.ttl_s, history=1, ttl=self.ttl_s
            )
        return self._leases

    def _keys(self, project_id: str) -> list[str]:
        prefix = subjects.validate_token(project_id, "project id")
        return [f"{prefix}.{n}" for n in range(self.limit)]

    async def _read(self, keys: list[str]) -> dict[str, Seen]:
        """The slot ``keys`` as they are now (one read per slot, in parallel: cheaper than a
        watch, which creates a consumer)."""
        leases = await self._bucket()
        seen = await asyncio.gather(*(leases.read(k) for k in keys))
        return dict(zip(keys, seen, strict=True))

    async def held(self, project_id: str) -> dict[str, str]:
        """Slot key -> child id, of the project's slots held now."""
        return {
            k: s.holder for k, s in (await self._read(self._keys(project_id))).items() if s.holder is not None
        }

    async def acquire(self, project_id: str, child_id: str) -> str | None:
        """Take a slot for ``child_id`` (the one it holds, else a free one): its key; ``None``
        when all are taken."""
        leases = await self._bucket()
        slots = await self._read(self._keys(project_id))
        mine = [k for k, s in slots.items() if s.holder == child_id]
        free = [k for k, s in slots.items() if s.holder is None]
        for key in mine + free:
            if isinstance(await leases.take(key, child_id, slots[key]), Held):
                return key
            # taken by another start meanwhile: the next one
        return None

    async def release(self, project_id: str, child_id: str, key: str | None = None) -> None:
        """Free the slot ``child_id`` holds (``key`` when known, else found by reading them)."""
        leases = await self._bucket()
        slots = await self._read(self._keys(project_id) if key is None else [key])
        for k, seen in slots.items():
            if seen.holder == child_id:  # a slot that expired and went to another child stays its
                await leases.release(Held(k, child_id, seen.revision, seen.since))
