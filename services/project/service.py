"""The project service (seed 000 ``Project.Server``): a project's control plane.

Endpoints (nats.micro ``jidocode-project``, one endpoint per verb for every
project: ``jido.project.<p>.<verb>``)::

    info                 GetProject -> ProjectInfo, the project's registry record
    list_tools, policy   the policy-filtered tool catalog (tooling.py)
    reload_assets        ReloadAssets -> AssetReport, forwarded to the asset loader

Conversations are not forwarded through here: clients call the conversation
service directly (``jido.conversations.<p>.<verb>``), which reads the same
registry, so a message takes one hop.

Stateless: any replica serves any project (it reads the registry through ``jidocode.shared.registry``).
"""

from __future__ import annotations

import asyncio
import logging

from jidocode.shared.clients import AssetsClient
from jidocode.shared.config import Config
from jidocode.shared.endpoints import endpoint
from jidocode.shared.envelope import Envelope
from jidocode.shared.events.assets import AssetReport, ReloadAssets
from jidocode.shared.events.engine import GetProject, ProjectInfo
from jidocode.shared.registry import WatchedDirectory
from jidocode.shared.service import ServiceLifecycle

from . import tooling

__all__ = ["serve"]

log = logging.getLogger("jidocode.project")

#: How long a forwarded reload may take (the loader reads every asset file again).
RELOAD_TIMEOUT_S = 60.0

#: Modules that add endpoints with ``register(host, bus, directory)``.
_PARTS = (tooling,)


async def serve(config: Config, stop: asyncio.Event) -> None:
    async with ServiceLifecycle(config, "project") as life:
        bus = life.bus
        directory = await WatchedDirectory.open(bus)
        life.on_close(directory.close)
        host = life.host(description="JidoCode project control plane")

        async def info(project_id: str, request: GetProject, env: Envelope) -> ProjectInfo:
            return await directory.get(project_id)

        async def reload_assets(project_id: str, request: ReloadAssets, env: Envelope) -> AssetReport:
            """Seed 000 ``Project.Server`` forwards ``:reload_assets`` to its ``AssetStore``."""
            await directory.get(project_id)  # unknown or stopped: said here, not by the loader
            return await AssetsClient(bus, project_id, timeout=RELOAD_TIMEOUT_S).reload()

        host.serve_project(endpoint("project", "info"), info)
        host.serve_project(endpoint("project", "reload_assets"), reload_assets)
        for part in _PARTS:
            part.register(host, bus, directory)
        await life.run(stop, ready="project service ready")
