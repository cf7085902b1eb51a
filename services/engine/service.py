"""The engine service (seed 000 ``JidoCode``/``Engine``): project lifecycle and registry.

Endpoints (nats.micro ``jidocode-engine``)::

    jido.engine.start_project    StartProject   -> ProjectInfo (same root: the same project back)
    jido.engine.stop_project     StopProject    -> ProjectInfo of the stopped project
    jido.engine.list_projects    ListProjects   -> ProjectList
    jido.engine.whereis_project  WhereisProject -> ProjectLocation (record + serving instances)

Signals: ``project.started`` and ``project.stopped`` on ``jido.sig.*``.
"""

from __future__ import annotations

import asyncio
import json
import logging

from jidocode.shared import subjects
from jidocode.shared.bus import Bus, gather
from jidocode.shared.config import Config
from jidocode.shared.endpoints import endpoint
from jidocode.shared.envelope import Envelope
from jidocode.shared.errors import InvalidInput
from jidocode.shared.events.engine import (
    ListProjects,
    ProjectInfo,
    ProjectList,
    ProjectLocation,
    ProjectStarted,
    ProjectStopped,
    StartProject,
    StopProject,
    WhereisProject,
)
from jidocode.shared.service import ServiceLifecycle

from .paths import validate_data_dir, validate_root
from .registry import ProjectRegistry

__all__ = ["Engine", "serve"]

log = logging.getLogger("jidocode.engine")


class Engine:
    """The engine's handlers, over a bus and the registry."""

    def __init__(self, bus: Bus, registry: ProjectRegistry) -> None:
        self.bus = bus
        self.registry = registry

    async def start_project(self, cmd: StartProject, env: Envelope) -> ProjectInfo:
        realpath = validate_root(cmd.root_path)
        data_dir = validate_data_dir(cmd.data_dir)
        info, created = await self.registry.create(realpath, data_dir, cmd.opts)
        if created:
            log.info("project %s started on %s", info.project_id, info.root_path)
            await self.bus.emit(
                ProjectStarted(project_id=info.project_id, root_path=info.root_path, data_dir=info.data_dir),
                project_id=info.project_id,
                correlation_id=env.correlation_id,
                causation_id=env.id,
            )
        return info

    async def stop_project(self, cmd: StopProject, env: Envelope) -> ProjectInfo:
        _check_id(cmd.project_id)
        info, changed = await self.registry.stop(cmd.project_id)
        # said again on a second stop: a replica that missed the first (reconnecting) hears it then
        log.info("project %s %s", info.project_id, "stopped" if changed else "stopped (again)")
        await self.bus.emit(
            ProjectStopped(project_id=info.project_id, root_path=info.root_path),
            project_id=info.project_id,
            correlation_id=env.correlation_id,
            causation_id=env.id,
        )
        return info

    async def list_projects(self, cmd: ListProjects, env: Envelope) -> ProjectList:
        return ProjectList(projects=await self.registry.list())

    async def whereis_project(self, cmd: WhereisProject, env: Envelope) -> ProjectLocation:
        _check_id(cmd.project_id)
        info = await self.registry.get(cmd.project_id)
        return ProjectLocation(project=info, hosts=await self._project_hosts())

    async def _project_hosts(self) -> list[str]:
        """The project-service instances that serve this project (any of them, by queue group)."""
        hosts: list[str] = []
        for msg in await gather(self.bus.nc, subjects.srv("PING", "project"), wait=0.25):
            ping = json.loads(msg.data)
            hosts.append(ping.get("metadata", {}).get("instance") or ping.get("id", "?"))
        return sorted(hosts)


def _check_id(project_id: str) -> None:
    try:
        subjects.validate_token(project_id, "project id")
    except ValueError as exc:
        raise InvalidInput(str(exc), details={"project_id": project_id}) from None


async def serve(config: Config, stop: asyncio.Event) -> None:
    async with ServiceLifecycle(config, "engine") as life:
        kv = await life.bus.kv(subjects.BUCKET_PROJECTS, history=1)
        engine = Engine(life.bus, ProjectRegistry(kv))
        host = life.host(description="JidoCode engine: project lifecycle and registry")
        host.serve(endpoint("engine", "start_project"), engine.start_project)
        host.serve(endpoint("engine", "stop_project"), engine.stop_project)
        host.serve(endpoint("engine", "list_projects"), engine.list_projects)
        host.serve(endpoint("engine", "whereis_project"), engine.whereis_project)
        await life.run(stop, ready="engine ready")
