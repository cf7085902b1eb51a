"""Read access to the engine's project registry, for the services that serve projects.

Project services are stateless: any replica serves any project, looking up
its record (root realpath, data dir) in the ``jido_projects`` KV bucket.
"""

from __future__ import annotations

import nats.js.errors
from nats.js.kv import KeyValue

from jidocode.shared import subjects
from jidocode.shared.bus import Bus
from jidocode.shared.errors import InvalidInput, NotFound
from jidocode.shared.events.engine import ProjectInfo

__all__ = ["ProjectDirectory"]


class ProjectDirectory:
    def __init__(self, kv: KeyValue) -> None:
        self.kv = kv

    @classmethod
    async def open(cls, bus: Bus) -> ProjectDirectory:
        return cls(await bus.kv(subjects.BUCKET_PROJECTS, history=1))

    async def get(self, project_id: str) -> ProjectInfo:
        """The running project ``project_id``; ``NotFound`` when the engine has no such project."""
        try:
            subjects.validate_token(project_id, "project id")
        except ValueError as exc:
            raise InvalidInput(str(exc), details={"project_id": project_id}) from None
        if project_id.startswith("root."):
            raise NotFound(f"unknown project id {project_id!r}", details={"project_id": project_id})
        try:
            entry = await self.kv.get(project_id)
        except (nats.js.errors.KeyNotFoundError, nats.js.errors.KeyDeletedError):
            raise NotFound(
                f"unknown project id {project_id!r}: start it with `jidocode projects start <dir>`",
                details={"project_id": project_id},
            ) from None
        if not entry.value:
            raise NotFound(f"unknown project id {project_id!r}", details={"project_id": project_id})
        return ProjectInfo.model_validate_json(entry.value)
