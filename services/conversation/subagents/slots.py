"""Sub-agents at once per project, over every replica: slots in the KV bucket ``jido_subagent_slots``.

Key ``<project_id>.<n>`` for ``n`` below the limit; value the child conversation's id.
A start takes a free slot with ``create`` (which succeeds only when the key is free,
so two replicas never take the same one) and the end deletes it. A slot already
holding the same child (the parent's replica died and the call runs again) is
taken as it is. The bucket's entries expire after the sub-agent timeout plus a
margin: a slot left by a parent that was deleted mid-call frees itself.
"""

from __future__ import annotations

import asyncio

import nats.js.errors
from nats.js.kv import KeyValue

from jidocode.shared import subjects
from jidocode.shared.bus import Bus

__all__ = ["BUCKET_SUBAGENT_SLOTS", "SubagentSlots"]

BUCKET_SUBAGENT_SLOTS = subjects.BUCKET_SUBAGENT_SLOTS


class SubagentSlots:
    def __init__(self, bus: Bus, *, limit: int, ttl_s: float) -> None:
        self._bus = bus
        self.limit = limit
        self.ttl_s = ttl_s
        self._kv: KeyValue | None = None

    async def _bucket(self) -> KeyValue:
        if self._kv is None:
            self._kv = await self._bus.kv(BUCKET_SUBAGENT_SLOTS, history=1, ttl=self.ttl_s)
        return self._kv

    async def held(self, project_id: str) -> dict[str, str]:
        """Slot key -> child id, of the project's slots held now (one read per slot, in parallel:
        cheaper than a watch, which creates a consumer)."""
        kv = await self._bucket()
        prefix = subjects.validate_token(project_id, "project id")
        keys = [f"{prefix}.{n}" for n in range(self.limit)]

        async def _read(key: str) -> str | None:
            try:
                entry = await kv.get(key)
            except (nats.js.errors.KeyNotFoundError, nats.js.errors.KeyDeletedError):
                return None
            return entry.value.decode() if entry.value else None

        values = await asyncio.gather(*(_read(k) for k in keys))
        return {k: v for k, v in zip(keys, values, strict=True) if v}

    async def acquire(self, project_id: str, child_id: str) -> str | None:
        """Take a slot for ``child_id`` (or find the one it holds): its key; ``None`` when all are taken."""
        kv = await self._bucket()
        held = await self.held(project_id)
        for key, holder in held.items():
            if holder == child_id:
                return key
        for n in range(self.limit):
            key = f"{project_id}.{n}"
            if key in held:
                continue
            try:
                await kv.create(key, child_id.encode())
            except nats.js.errors.KeyWrongLastSequenceError:
                continue  # taken by another start meanwhile
            return key
        return None

    async def release(self, project_id: str, child_id: str, key: str | None = None) -> None:
        """Free the slot ``child_id`` holds (``key`` when known, else found by reading them)."""
        kv = await self._bucket()
        keys = (
            [key]
            if key is not None
            else [k for k, v in (await self.held(project_id)).items() if v == child_id]
        )
        for k in keys:
            await kv.delete(k)
