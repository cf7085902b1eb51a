"""What every typed client shares: one bus, one timeout, the endpoint table."""

from __future__ import annotations

from typing import Any

from jidocode.shared.bus import Bus
from jidocode.shared.endpoints import Endpoint, endpoint
from jidocode.shared.events import Command, R
from jidocode.shared.subjects import validate_token

__all__ = ["ClientBase", "Ext", "ProjectScoped"]

#: Envelope extensions a caller may set on a request: ``correlation_id``,
#: ``causation_id``, ``conversation_id``, ``traceparent``.
Ext = Any


class ClientBase:
    """A client of one service (``service`` names it in ``shared.endpoints``)."""

    service: str = ""

    def __init__(self, bus: Bus, *, timeout: float = 5.0) -> None:
        if timeout <= 0:
            raise ValueError(f"timeout must be positive, got {timeout}")
        self.bus = bus
        self.timeout = timeout

    def _endpoint(self, verb: str) -> Endpoint:
        return endpoint(self.service, verb)

    async def _call(
        self,
        verb: str,
        command: Command[R],
        *,
        project_id: str | None = None,
        timeout: float | None = None,
        **ext: Ext,
    ) -> R:
        ep = self._endpoint(verb)
        if project_id is not None:
            ext["project_id"] = project_id  # the subject's project: a projectid naming another is refused
        return await self.bus.call(ep.subject(project_id), command, timeout=timeout or self.timeout, **ext)


class ProjectScoped(ClientBase):
    """A client bound to one project."""

    def __init__(self, bus: Bus, project_id: str, *, timeout: float = 5.0) -> None:
        super().__init__(bus, timeout=timeout)
        self.project_id = validate_token(project_id, "project id")

    async def _scoped(self, verb: str, command: Command[R], *, timeout: float | None = None, **ext: Ext) -> R:
        return await self._call(verb, command, project_id=self.project_id, timeout=timeout, **ext)
