"""One service lifecycle (issue 27 point 6) over a real nats-server.

:class:`ServiceLifecycle` connects, starts the host, waits for stop, drains, and closes what
was registered (last first) and the bus last, also when the build fails; a per-project
endpoint served with :meth:`ServiceHost.serve_project` is handed the subject's project id.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator

import pytest

from jidocode.shared import subjects
from jidocode.shared.bus import Bus
from jidocode.shared.config import Config
from jidocode.shared.endpoints import endpoint
from jidocode.shared.envelope import Envelope
from jidocode.shared.errors import InvalidInput
from jidocode.shared.events.engine import GetProject, ListProjects, ProjectInfo, ProjectList
from jidocode.shared.service import ServiceHost, ServiceLifecycle

WAIT = 30.0


@pytest.fixture
async def host_bus(config: Config) -> AsyncIterator[Bus]:
    b = await Bus.connect(config, "project")
    yield b
    await b.close()


def _info(project_id: str) -> ProjectInfo:
    return ProjectInfo(project_id=project_id, root_path="/r", started_at="2026-01-01T00:00:00Z")


async def test_serve_project_hands_the_subject_project_id_and_refuses_another(
    bus: Bus, host_bus: Bus
) -> None:
    seen: list[str] = []

    async def info(project_id: str, cmd: GetProject, env: Envelope) -> ProjectInfo:
        seen.append(project_id)
        return _info(project_id)

    host = ServiceHost(host_bus, name="project")
    host.serve_project(endpoint("project", "info"), info)
    await host.start()
    try:
        reply = await bus.call(subjects.project("P7", "info"), GetProject(), timeout=WAIT)
        assert reply.project_id == "P7" and seen == ["P7"]
        # a projectid extension naming another project: refused before the handler runs
        with pytest.raises(InvalidInput, match="does not match the subject's project 'P7'"):
            await bus.call(subjects.project("P7", "info"), GetProject(), project_id="P8", timeout=WAIT)
        assert seen == ["P7"]
    finally:
        await host.stop()


async def test_serve_project_refuses_an_endpoint_that_is_not_per_project(host_bus: Bus) -> None:
    async def listed(project_id: str, cmd: ListProjects, env: Envelope) -> ProjectList:
        return ProjectList()

    host = ServiceHost(host_bus, name="engine")
    with pytest.raises(ValueError, match=r"engine\.list_projects is not per project: use serve\(\)"):
        host.serve_project(endpoint("engine", "list_projects"), listed)


async def test_the_lifecycle_drains_then_closes_last_first_and_the_bus_last(
    config: Config, bus: Bus, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="jidocode.project")
    stop, ready, entered, release = asyncio.Event(), asyncio.Event(), asyncio.Event(), asyncio.Event()
    order: list[str] = []
    buses: list[Bus] = []

    async def info(project_id: str, cmd: GetProject, env: Envelope) -> ProjectInfo:
        entered.set()
        await release.wait()
        order.append("handled")
        return _info(project_id)

    async def closing(name: str) -> None:
        order.append(f"{name} closed (bus open: {not buses[0].nc.is_closed})")

    async def serve() -> None:
        async with ServiceLifecycle(config, "project") as life:
            buses.append(life.bus)
            life.on_close(lambda: closing("first"))
            life.host().serve_project(endpoint("project", "info"), info)
            life.on_close(lambda: closing("second"))
            await life.run(stop, ready="project test ready", on_ready=ready.set)

    service = asyncio.create_task(serve())
    await asyncio.wait_for(ready.wait(), WAIT)
    assert [r.getMessage() for r in caplog.records if r.name == "jidocode.project"] == ["project test ready"]
    call = asyncio.create_task(bus.call(subjects.project("P1", "info"), GetProject(), timeout=WAIT))
    await asyncio.wait_for(entered.wait(), WAIT)
    stop.set()
    release.set()
    assert (await call).project_id == "P1"  # the request in flight was answered: drained, not dropped
    await asyncio.wait_for(service, WAIT)
    assert order == ["handled", "second closed (bus open: True)", "first closed (bus open: True)"]
    assert buses[0].nc.is_closed


async def test_a_failed_build_still_closes_what_it_opened_and_the_bus(config: Config) -> None:
    closed: list[str] = []
    buses: list[Bus] = []

    async def close_store() -> None:
        closed.append("store")

    with pytest.raises(RuntimeError, match="no registry"):
        async with ServiceLifecycle(config, "project") as life:
            buses.append(life.bus)
            life.on_close(close_store)
            life.host()
            raise RuntimeError("no registry")
    assert closed == ["store"] and buses[0].nc.is_closed


async def test_a_lifecycle_has_one_host(config: Config) -> None:
    async with ServiceLifecycle(config, "project") as life:
        life.host()
        with pytest.raises(RuntimeError, match="project already has a service host"):
            life.host()
