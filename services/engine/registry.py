"""The project registry: a JetStream KV bucket (seed 000 ``ProjectRegistry``).

Keys: ``<project_id>`` holds the :class:`ProjectInfo` JSON; ``root.<hash>``
holds the id of the project started on that root, so the same root always maps
to one project, across engine replicas and restarts. The key scheme and the
reads are shared (:mod:`jidocode.shared.registry`); the engine alone writes.
"""

from __future__ import annotations

from datetime import UTC, datetime

import nats.js.errors
from ulid import ULID

from jidocode.shared.errors import NotFound
from jidocode.shared.events.engine import ProjectInfo
from jidocode.shared.registry import ProjectDirectory, root_key

__all__ = ["ProjectRegistry"]


class ProjectRegistry(ProjectDirectory):
    """The registry's reader plus its writes (create, stop)."""

    async def get(self, project_id: str) -> ProjectInfo:
        """The record of ``project_id``, running or stopped (``NotFound`` when there is none)."""
        info = await self.lookup(project_id)
        if info is None:
            raise NotFound(f"unknown project id {project_id!r}", details={"project_id": project_id})
        return info

    async def create(self, realpath: str, data_dir: str, opts: dict[str, object]) -> tuple[ProjectInfo, bool]:
        """Register a project on ``realpath``; returns ``(info, created)``.

        Idempotent: the same root gives back the project already there.
        """
        existing = await self.find_root(realpath)
        if existing is not None:
            if existing.status == "stopped":
                # started again: the same id, so its conversations and their history come back
                again = existing.model_copy(
                    update={
                        "status": "running",
                        "stopped_at": None,
                        "started_at": datetime.now(UTC).isoformat(),
                    }
                )
                await self.kv.put(again.project_id, again.model_dump_json().encode())
                return again, True
            return existing, False
        info = ProjectInfo(
            project_id=str(ULID()),
            root_path=realpath,
            data_dir=data_dir,
            started_at=datetime.now(UTC).isoformat(),
            opts=opts,
        )
        await self.kv.put(info.project_id, info.model_dump_json().encode())
        key = root_key(realpath)
        try:
            await self.kv.create(key, info.project_id.encode())
        except nats.js.errors.KeyWrongLastSequenceError:
            # Another replica registered this root first (or a stale index): settle on one.
            await self.kv.delete(info.project_id)
            winner = await self.find_root(realpath)
            if winner is not None:
                return winner, False
            await self.kv.put(info.project_id, info.model_dump_json().encode())
            await self.kv.put(key, info.project_id.encode())
        return info, True

    async def stop(self, project_id: str) -> tuple[ProjectInfo, bool]:
        """Mark the project stopped (its record and root index stay: the same root starts it again
        under the same id); ``(info, changed)``, ``changed`` false when it was stopped already."""
        info = await self.get(project_id)
        if info.status == "stopped":
            return info, False
        stopped = info.model_copy(update={"status": "stopped", "stopped_at": datetime.now(UTC).isoformat()})
        await self.kv.put(project_id, stopped.model_dump_json().encode())
        return stopped, True
