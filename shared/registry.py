"""Reading the project registry: the engine's JetStream KV bucket ``jido_projects``.

Keys: ``<project_id>`` holds the :class:`ProjectInfo` JSON; ``root.<hash>``
(:func:`root_key`) holds the id of the project started on that root, so the
same root always maps to one project.

The engine writes the bucket (``services/engine/registry.py`` builds on this
reader); every other service reads it through :class:`ProjectDirectory`:
project services are stateless, any replica serves any project by looking up
its record (root realpath, data dir) here.

:class:`WatchedDirectory` keeps the records in memory from a KV watch, so a
lookup on a hot path (every tool call, every conversation start) costs no
request; a record it has not seen yet is read from the bucket as before.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
from typing import Final, Self

import nats.js.errors
from nats.js.kv import KeyValue

from jidocode.shared import subjects
from jidocode.shared.bus import Bus
from jidocode.shared.errors import Conflict, InvalidInput, NotFound
from jidocode.shared.events.engine import ProjectInfo
from jidocode.shared.kv_keys import kv_keys

__all__ = ["ROOT_PREFIX", "ProjectDirectory", "WatchedDirectory", "root_key"]

log = logging.getLogger("jidocode.registry")

#: Prefix of the keys that index a project by its root (they are not projects).
ROOT_PREFIX: Final = "root."


def root_key(realpath: str) -> str:
    """The registry key that indexes a project by its root (one project per root)."""
    return ROOT_PREFIX + hashlib.sha256(realpath.encode()).hexdigest()[:40]


class ProjectDirectory:
    """Read access to the registry bucket."""

    def __init__(self, kv: KeyValue) -> None:
        self.kv = kv

    @classmethod
    async def open(cls, bus: Bus) -> Self:
        return cls(await bus.kv(subjects.BUCKET_PROJECTS, history=1))

    async def lookup(self, project_id: str) -> ProjectInfo | None:
        """The record of ``project_id``; ``None`` when there is none (no checks on the id)."""
        if project_id.startswith(ROOT_PREFIX):
            return None
        try:
            entry = await self.kv.get(project_id)
        except (nats.js.errors.KeyNotFoundError, nats.js.errors.KeyDeletedError):
            return None
        if not entry.value:
            return None
        return ProjectInfo.model_validate_json(entry.value)

    async def get(self, project_id: str) -> ProjectInfo:
        """The running project ``project_id``; ``NotFound`` when the engine has no such project,
        ``Conflict`` when it is stopped."""
        try:
            subjects.validate_token(project_id, "project id")
        except ValueError as exc:
            raise InvalidInput(str(exc), details={"project_id": project_id}) from None
        info = await self.lookup(project_id)
        if info is None:
            raise NotFound(
                f"unknown project id {project_id!r}: start it with `jidocode projects start <dir>`",
                details={"project_id": project_id},
            )
        if info.status == "stopped":
            # the bucket itself, not a copy the watch may not have brought up to date yet: a
            # project started again a moment ago is running
            info = await ProjectDirectory.lookup(self, project_id) or info
        if info.status == "stopped":
            raise Conflict(
                f"project {project_id!r} ({info.root_path}) is stopped: start it again with "
                f"`jidocode projects start {info.root_path}` (same id, same conversations)",
                details={"project_id": project_id, "status": "stopped", "root_path": info.root_path},
            )
        return info

    async def find_root(self, realpath: str) -> ProjectInfo | None:
        """The project started on ``realpath``, if any."""
        try:
            entry = await self.kv.get(root_key(realpath))
        except (nats.js.errors.KeyNotFoundError, nats.js.errors.KeyDeletedError):
            return None
        if not entry.value:
            return None
        return await self.lookup(entry.value.decode())

    async def list(self) -> list[ProjectInfo]:
        """Every registered project (running or stopped), oldest first."""
        out: list[ProjectInfo] = []
        for key in await kv_keys(self.kv):
            if key.startswith(ROOT_PREFIX):
                continue
            info = await self.lookup(key)
            if info is not None:
                out.append(info)
        return sorted(out, key=lambda p: p.started_at)


class WatchedDirectory(ProjectDirectory):
    """A :class:`ProjectDirectory` whose records live in memory, kept current by a KV watch.

    A started project is seen as soon as the watch delivers it (a miss falls
    back to reading the bucket), a stopped one is dropped when its delete
    arrives. If the watch ends (the connection closed), every lookup reads
    the bucket again.
    """

    def __init__(self, kv: KeyValue) -> None:
        super().__init__(kv)
        #: Set (and cleared by whoever waits) after each change the watch applies.
        self.changed = asyncio.Event()
        self._records: dict[str, ProjectInfo] = {}
        self._live = False
        self._task: asyncio.Task[None] | None = None

    @classmethod
    async def open(cls, bus: Bus) -> Self:
        directory = await super().open(bus)
        await directory.start()
        return directory

    async def start(self, *, timeout: float = 30.0) -> None:
        ready = asyncio.Event()
        self._task = asyncio.create_task(self._follow(ready), name="registry-watch")
        await asyncio.wait_for(ready.wait(), timeout)

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _follow(self, ready: asyncio.Event) -> None:
        try:
            watcher = await self.kv.watchall()
            async for entry in watcher:
                if entry is None:  # the current values are in
                    self._live = True
                    ready.set()
                    continue
                if entry.key.startswith(ROOT_PREFIX):
                    continue
                if entry.operation in ("DEL", "PURGE") or not entry.value:
                    self._records.pop(entry.key, None)
                else:
                    try:
                        self._records[entry.key] = ProjectInfo.model_validate_json(entry.value)
                    except ValueError:
                        log.warning("unreadable project record %s", entry.key)
                        self._records.pop(entry.key, None)
                self.changed.set()
        finally:
            self._live = False
            self._records.clear()
            ready.set()

    async def lookup(self, project_id: str) -> ProjectInfo | None:
        if self._live:
            cached = self._records.get(project_id)
            if cached is not None:
                return cached
        return await super().lookup(project_id)
