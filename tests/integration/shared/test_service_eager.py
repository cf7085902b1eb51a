"""The service host starts each request eagerly (``shared/eager.py``), over a real nats-server:
a request answered without waiting costs no task, and one that waits still runs concurrently."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Coroutine
from typing import Any

import pytest

from jidocode.shared.bus import Bus
from jidocode.shared.config import Config
from jidocode.shared.envelope import Envelope
from jidocode.shared.events.engine import ProjectInfo, StartProject

from .test_service import _host, _info


@pytest.fixture
async def host_bus(config: Config) -> AsyncIterator[Bus]:
    b = await Bus.connect(config, "engine")
    yield b
    await b.close()


class TaskCount:
    """Counts the tasks the running loop makes (through its task factory) while installed."""

    def __init__(self) -> None:
        self.coroutines: list[str] = []

    def __call__(
        self, loop: asyncio.AbstractEventLoop, coro: Coroutine[Any, Any, Any], **options: Any
    ) -> asyncio.Task[Any]:
        self.coroutines.append(getattr(coro, "__qualname__", type(coro).__name__))
        return asyncio.Task(coro, loop=loop, **options)


async def test_requests_answered_without_waiting_make_no_task_each(bus: Bus, host_bus: Bus) -> None:
    async def start(cmd: StartProject, env: Envelope) -> ProjectInfo:
        return _info(env.correlation_id or "", cmd.root_path)

    host = await _host(host_bus, (StartProject, "t.eager", start))
    await bus.call("t.eager", StartProject(root_path="/r"))  # the host's first request makes its spare
    count = TaskCount()
    loop = asyncio.get_running_loop()
    loop.set_task_factory(count)
    try:
        for n in range(20):
            reply = await bus.call("t.eager", StartProject(root_path=f"/r{n}"), correlation_id=f"K{n}")
            assert reply == _info(f"K{n}", f"/r{n}")
    finally:
        loop.set_task_factory(None)
    assert [c for c in count.coroutines if "_handle" in c] == []  # none per request
    assert host.inflight == 0
    await host.stop()


async def test_a_waiting_request_does_not_hold_up_the_next_ones(bus: Bus, host_bus: Bus) -> None:
    gate, entered = asyncio.Event(), asyncio.Event()

    async def start(cmd: StartProject, env: Envelope) -> ProjectInfo:
        if cmd.root_path == "/wait":
            entered.set()
            await gate.wait()
        return _info("P", cmd.root_path)

    host = await _host(host_bus, (StartProject, "t.mixed", start))
    waiting = asyncio.create_task(bus.call("t.mixed", StartProject(root_path="/wait"), timeout=30))
    await asyncio.wait_for(entered.wait(), 10)
    for n in range(5):  # answered eagerly while the first one waits in its task
        assert (await bus.call("t.mixed", StartProject(root_path=f"/q{n}"))).root_path == f"/q{n}"
    assert host.inflight == 1
    gate.set()
    assert (await asyncio.wait_for(waiting, 30)).root_path == "/wait"
    await host.stop()
    assert host.inflight == 0
