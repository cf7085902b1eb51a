"""The tool runner's checkpoints: one per turn before its first writing call, and the endpoints.

:meth:`Checkpoints.before` runs in the pipeline right before a call that can write (a built-in
that is not read-only, an MCP tool not marked read-only, an asset tool) of a conversation's turn
(``meta.turn_id``): the first such call of the turn records the checkpoint, the others find it.
:meth:`Checkpoints.record_after` records what the agent left once the call ended, before its
result is returned (in the background when the call failed or was cancelled). A checkpoint that
cannot be recorded never stops the call: the call's result says so in its logs.

The store of a project (:class:`.store.CheckpointStore`) is used by one task at a time per
replica (a lock per project); between replicas, a turn's checkpoint is created once (an atomic
ref) and the objects are content-addressed. The tree is listed and scanned once for all the
checkpoints and after-call records asked for while the previous scan ran (:mod:`.coalesce`):
fifty conversations of one project cost two scans at a time, not fifty in a row.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import AsyncIterator, Mapping
from pathlib import Path

from jidocode.shared.config import default_jido_home
from jidocode.shared.errors import JidoError
from jidocode.shared.events.engine import ProjectInfo
from jidocode.shared.events.tools import (
    CheckpointDiff,
    CheckpointList,
    CheckpointRestored,
    ToolCallMeta,
)

from .coalesce import Coalesced
from .listing import Listing, list_files
from .settings import CheckpointSettings, user_checkpoint_settings
from .store import CheckpointStore, Snapshot, store_path
from .usage import checkpoints_home

__all__ = ["Checkpoints"]

log = logging.getLogger("jidocode.tool_runner.checkpoints")

#: Seconds between two expiry passes over a project's checkpoints (each reads them all).
EXPIRE_EVERY_S = 60.0


class Checkpoints:
    """The checkpoint stores of the projects this replica serves."""

    def __init__(
        self,
        home: Path | None = None,
        *,
        jido_home: Path | None = None,
        source_env: Mapping[str, str] | None = None,
        expire_every_s: float = EXPIRE_EVERY_S,
    ) -> None:
        self.home = home or checkpoints_home()
        self.jido_home = jido_home or default_jido_home()
        self.source_env = dict(os.environ if source_env is None else source_env)
        self._stores: dict[str, CheckpointStore] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        #: The after-call records still running (:meth:`after`).
        self._pending: set[asyncio.Task[None]] = set()
        self._snapshots: dict[str, Coalesced[Snapshot]] = {}
        #: When each project's checkpoints were last expired (monotonic seconds).
        self._expired_at: dict[str, float] = {}
        self.expire_every_s = expire_every_s

    def settings(self) -> CheckpointSettings:
        return user_checkpoint_settings(self.jido_home)

    async def settled(self) -> None:
        """Wait until every after-call record started so far is done."""
        while self._pending:
            await asyncio.gather(*self._pending, return_exceptions=True)

    async def aclose(self) -> None:
        """Finish the pending records, then close the stores."""
        await self.settled()
        for store in self._stores.values():
            store.close()
        self._stores.clear()

    @contextlib.asynccontextmanager
    async def _store(self, info: ProjectInfo) -> AsyncIterator[CheckpointStore]:
        """The project's store, held by this task alone."""
        lock = self._locks.setdefault(info.project_id, asyncio.Lock())
        async with lock:
            settings = await asyncio.to_thread(self.settings)
            store = self._stores.get(info.project_id)
            if store is None or store.root != info.root_path:
                path = store_path(self.home, info.project_id)
                store = await asyncio.to_thread(
                    CheckpointStore, path, info.root_path, max_file_bytes=settings.max_file_bytes
                )
                self._stores[info.project_id] = store
            store.max_file_bytes = settings.max_file_bytes
            yield store

    async def _listing(self, store: CheckpointStore) -> Listing:
        return await list_files(
            str(store.path), store.root, source_env=self.source_env, jido_home=str(self.jido_home)
        )

    async def _snapshot(self, info: ProjectInfo) -> Snapshot:
        """The project's tree, listed and scanned after this call (shared with the callers that
        asked while the previous scan ran)."""

        async def take() -> Snapshot:
            async with self._store(info) as store:
                listing = await self._listing(store)
                return await asyncio.to_thread(store.snapshot, listing)

        return await self._snapshots.setdefault(info.project_id, Coalesced()).get(take)

    # --- recording (the pipeline) ----------------------------------------------------------------

    async def before(self, meta: ToolCallMeta, info: ProjectInfo) -> str | None:
        """Record the turn's checkpoint unless it has one; a line for the call's logs when it failed."""
        if meta.turn_id is None or meta.conversation_id is None:
            return None
        conversation, turn = meta.conversation_id, meta.turn_id
        try:
            settings = await asyncio.to_thread(self.settings)
            if not settings.enabled:
                return None
            async with self._store(info) as store:
                if await asyncio.to_thread(store.has, conversation, turn):
                    return None
            snap = await self._snapshot(info)
            async with self._store(info) as store:
                made = await asyncio.to_thread(
                    store.record_snapshot, conversation, turn, meta.turn_label or "", snap
                )
                if made is not None:
                    log.info("checkpoint %s of %s turn %s recorded", made.id, conversation, turn)
                    if settings.expire and self._expiry_due(info.project_id):
                        await asyncio.to_thread(self._expire, store, settings)
        except (JidoError, OSError, ValueError) as exc:
            text = exc.message if isinstance(exc, JidoError) else str(exc)
            log.warning("no checkpoint of %s turn %s: %s", conversation, turn, text)
            return f"no checkpoint of this turn could be recorded: {text}"
        return None

    async def record_after(self, meta: ToolCallMeta, info: ProjectInfo) -> None:
        """Record what the agent left after a writing call of a checkpointed turn, before its
        result is returned (never raises: a failure is logged)."""
        if meta.turn_id is not None and meta.conversation_id is not None:
            await self._after(meta, info)

    def after(self, meta: ToolCallMeta, info: ProjectInfo) -> None:
        """:meth:`record_after` in the background (a call that failed or was cancelled: the store's
        lock orders it before any later use of the store)."""
        if meta.turn_id is None or meta.conversation_id is None:
            return
        task = asyncio.get_running_loop().create_task(self._after(meta, info))
        self._pending.add(task)
        task.add_done_callback(self._pending.discard)

    async def _after(self, meta: ToolCallMeta, info: ProjectInfo) -> None:
        assert meta.turn_id is not None and meta.conversation_id is not None
        try:
            async with self._store(info) as store:
                if not await asyncio.to_thread(store.has, meta.conversation_id, meta.turn_id):
                    return
            snap = await self._snapshot(info)
            async with self._store(info) as store:
                await asyncio.to_thread(store.record_after_snapshot, meta.conversation_id, meta.turn_id, snap)
        except (JidoError, OSError, ValueError) as exc:
            log.warning("checkpoint of %s: the state after the call not recorded: %s", meta.turn_id, exc)

    def _expiry_due(self, project_id: str) -> bool:
        now = time.monotonic()
        last = self._expired_at.get(project_id)
        if last is not None and now - last < self.expire_every_s:
            return False
        self._expired_at[project_id] = now
        return True

    @staticmethod
    def _expire(store: CheckpointStore, settings: CheckpointSettings) -> None:
        gone = store.expire(
            max_age_days=settings.max_age_days, max_per_conversation=settings.max_per_conversation
        )
        if gone:
            store.prune()
            log.info("checkpoints of %s: %d expired", store.root, gone)

    # --- the endpoints ---------------------------------------------------------------------------

    async def listed(self, info: ProjectInfo, conversation_id: str | None) -> CheckpointList:
        async with self._store(info) as store:
            found = await asyncio.to_thread(store.checkpoints, conversation_id)
        return CheckpointList(checkpoints=[c.info for c in found])

    async def diff(self, info: ProjectInfo, checkpoint: str) -> CheckpointDiff:
        await self.settled()
        async with self._store(info) as store:
            listing = await self._listing(store)
            return await asyncio.to_thread(store.diff, checkpoint, listing)

    async def restore(
        self, info: ProjectInfo, checkpoint: str, paths: list[str] | None, overwrite: bool
    ) -> CheckpointRestored:
        await self.settled()
        async with self._store(info) as store:
            listing = await self._listing(store)
            done = await asyncio.to_thread(
                lambda: store.restore(checkpoint, listing, paths=paths, overwrite=overwrite)
            )
            await asyncio.to_thread(store.mark_left, await self._listing(store))
        log.info(
            "checkpoint %s restored: %d paths, %d kept",
            done.checkpoint.id,
            len(done.restored),
            len(done.kept),
        )
        return done
