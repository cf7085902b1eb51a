"""Which services exist and how to run each (``jidocode serve <name>``, ``jidocode up``).

Each service package has ``service.py`` with ``async def serve(config, stop)``, one
``shared.service.ServiceLifecycle`` each: connect, register its endpoints, run until
``stop`` is set, then drain and close.
"""

from __future__ import annotations

import asyncio
import importlib
from typing import cast

from jidocode.shared.config import Config
from jidocode.shared.runner import Serve

__all__ = ["FRONTENDS", "RUNNABLE", "SERVICES", "Serve", "load_serve", "serve_many"]

#: Start order: the engine first (it owns the project registry), then the rest.
SERVICES: tuple[str, ...] = ("engine", "project", "asset_loader", "tool_runner", "conversation", "prd")
#: Services that face users over HTTP rather than answer on the bus (no ``$SRV.PING``):
#: ``jidocode up`` starts them after :data:`SERVICES`.
FRONTENDS: tuple[str, ...] = ("gateway",)
#: Everything ``jidocode serve <name>`` runs.
RUNNABLE: tuple[str, ...] = (*SERVICES, *FRONTENDS)


def load_serve(name: str) -> Serve:
    """The ``serve`` coroutine function of service ``name``."""
    if name not in RUNNABLE:
        raise ValueError(f"unknown service {name!r}: expected one of {', '.join(RUNNABLE)}")
    module = importlib.import_module(f"jidocode.services.{name}.service")
    return cast(Serve, module.serve)


async def serve_many(config: Config, stop: asyncio.Event, names: tuple[str, ...] = SERVICES) -> None:
    """Run several services in this process (tests, single-process mode) until ``stop``."""
    async with asyncio.TaskGroup() as group:
        for name in names:
            group.create_task(load_serve(name)(config, stop), name=f"service-{name}")
