"""Reading the project registry: the engine's JetStream KV bucket ``jido_projects``.

Keys: ``<project_id>`` holds the :class:`ProjectInfo` JSON; ``root.<hash>``
(:func:`root_key`) holds the id of the project started on that root, so the
same root always maps to one project.

The engine writes the bucket (``services/engine/registry.py`` builds on this
reader); every other service reads it through :class:`ProjectDirectory`:
project services are stateless, any replica serves any project by looking up
its record (root realpath, data dir) here.
"""

from __future__ import annotations

import hashlib
from typing import Final, Self

import nats.js.errors
from nats.js.kv import KeyValue

from jidocode.shared import subjects
from jidocode.shared.bus import Bus
from jidocode.shared.errors import InvalidInput, NotFound
from jidocode.shared.events.engine import ProjectInfo

__all__ = ["ROOT_PREFIX", "ProjectDirectory", "root_key"]

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
        """The running project ``project_id``; ``NotFound`` when the engine has no such project."""
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
        """Every registered project, oldest first."""
        try:
            keys = await self.kv.keys()
        except nats.js.errors.NoKeysError:
            return []
        out: list[ProjectInfo] = []
        for key in keys:
            if key.startswith(ROOT_PREFIX):
                continue
            info = await self.lookup(key)
            if info is not None:
                out.append(info)
        return sorted(out, key=lambda p: p.started_at)
