"""A real nats-server with the engine, the project service and tool-runner replicas in-process."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from jidocode.services.registry import serve_many
from jidocode.services.tool_runner.service import ToolRunner
from jidocode.shared import subjects
from jidocode.shared.bus import Bus
from jidocode.shared.config import Config
from tests.helpers import wait_for_services
from tests.integration.tools.support import RunnerFactory, Signals


@pytest.fixture
async def stack(config: Config) -> AsyncIterator[Config]:
    """Engine and project service (the tool runners are started per test)."""
    stop = asyncio.Event()
    task = asyncio.create_task(serve_many(config, stop, ("engine", "project")))
    try:
        await wait_for_services(config, ("engine", "project"), timeout=20)
        yield config
    finally:
        stop.set()
        await asyncio.wait_for(task, 20)


@pytest.fixture
async def runners(stack: Config) -> AsyncIterator[RunnerFactory]:
    """Start tool-runner replicas, each on a bus connection of its own."""
    started: list[tuple[ToolRunner, Bus]] = []

    async def start(*, quota_wait_s: float = 30.0, instance: str = "r") -> ToolRunner:
        cfg = stack.model_copy(update={"instance": f"{instance}{len(started)}"})
        bus = await Bus.connect(cfg, "tool_runner")
        runner = ToolRunner(bus, cfg, quota_wait_s=quota_wait_s)
        await runner.start()
        started.append((runner, bus))
        return runner

    yield start
    for runner, bus in started:
        await runner.stop()
        await bus.close()


@pytest.fixture
async def signals(bus: Bus) -> AsyncIterator[Signals]:
    s = Signals()
    sub = await bus.subscribe(subjects.signal_filter(), s.on)
    await bus.nc.flush()
    yield s
    await sub.unsubscribe()
