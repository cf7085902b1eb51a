"""Sub-agents at once per project, over every replica: slots in the KV bucket ``jido_subagent_slots``.

Key ``<project_id>.<n>`` for ``n`` below the limit; value the child conversation's id.
A start takes a free slot with ``create`` (which succeeds only when the key is free,
so two replicas never take the same one) and the end deletes it. A slot already
holding the same child (the parent's replica died and the call runs again) is
taken as it is. The bucket's entries expire after the sub-agent timeout plus a
margin: a slot left by a parent that was deleted mid-call frees itself.
"""

from __future__ import annotations

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
        """Slot key -> child id, of the project's slots held now."""
        kv = await self._bucket()
        prefix = subjects.validate_token(project_id, "project id")
        watcher = await kv.watch(f"{prefix}.*", ignore_deletes=True)
        out: dict[str, str] = {}
        try:
            async for entry in watcher:
                if entry is None:
                    break
                if entry.value:
                    out[entry.key] = entry.value.decode()
        finally:
            await watcher.stop()  # type: ignore[no-untyped-call]
        return out

    async def acquire(self, project_id: str, child_id: str) -> bool:
        """Take a slot for ``child_id`` (or find the one it holds); ``False`` when all are taken."""
        kv = await self._bucket()
        held = await self.held(project_id)
        if child_id in held.values():
            return True
        for n in range(self.limit):
            key = f"{project_id}.{n}"
            if key in held:
                continue
            try:
                await kv.create(key, child_id.encode())
            except nats.js.errors.KeyWrongLastSequenceError:
                continue  # taken by another start meanwhile
            return True
        return False

    async def release(self, project_id: str, child_id: str) -> None:
        kv = await self._bucket()
        for key, holder in (await self.held(project_id)).items():
            if holder == child_id:
                await kv.delete(key)
