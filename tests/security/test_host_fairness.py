"""One project never stalls another in the tool runner (issue 24, finding 11; decision 0306).

The attack: a project (a model calling tools in a loop, or a hostile client of it) queues hundreds
of calls behind its own quota. Each waited for its quota slot while holding one of the runner's
shared request slots (``ServiceHost(max_concurrent=…)``), so once the slots were full another
project's ``read_file`` waited as long as the queued calls did (27-30 s, the quota wait).

Judged through a real tool runner on a real nats-server, by the order of what happens (results and
``tool.*`` signals), never by timing: another project's call completes while every queued call of
the flooding project still waits. The limits still hold: a project never runs more calls than its
quota, the runner never more than its request slots, and a full queue refuses the overflow with
``quota_exceeded`` naming the bound. The same holds for calls waiting for a project's MCP server to
start. (``bench/fairness.py`` measures the latency.)
"""

from __future__ import annotations

import asyncio
import fcntl
import json
import os
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from pathlib import Path
from typing import Any

import pytest

from jidocode.services.registry import serve_many
from jidocode.services.tool_runner.call import CallKey
from jidocode.services.tool_runner.mcp.host import START_TIMEOUT_ENV
from jidocode.services.tool_runner.service import ToolRunner
from jidocode.shared import subjects
from jidocode.shared.bus import Bus
from jidocode.shared.clients import ToolsClient
from jidocode.shared.config import Config
from jidocode.shared.envelope import Envelope
from jidocode.shared.events.tools import ToolResult
from jidocode.shared.trust import trust_project
from tests.helpers import wait_for_services
from tests.integration.tools.mcp_support import FLAKY, sandbox_readable, stdio, write_mcp_json
from tests.integration.tools.support import Signals, failure, run_tool, start_project, write_settings

pytestmark = pytest.mark.slow

#: Calls of the flooding project queued behind its quota (more than the runner's 256 request slots).
FLOOD = 300
#: A project that runs one call at once, for as long as the test lets it.
ONE_AT_A_TIME = {
    "permissions": {"allow": ["Bash(sleep:*)", "Read"]},
    "tools": {"max_concurrent_per_project": 1, "timeout_s": 900},
}
#: How long a call of the flooding project may wait for its quota: longer than any test.
QUOTA_WAIT_S = 900.0

Start = Callable[..., Awaitable[ToolRunner]]


@pytest.fixture
async def start_runner(config: Config) -> AsyncIterator[Start]:
    """Engine and project service in this process; ``start_runner(**options)`` adds a tool runner."""
    stop = asyncio.Event()
    services = asyncio.create_task(serve_many(config, stop, ("engine", "project")))
    started: list[tuple[ToolRunner, Bus]] = []

    async def start(**options: Any) -> ToolRunner:
        bus = await Bus.connect(config.model_copy(update={"instance": "fair"}), "tool_runner")
        runner = ToolRunner(bus, config, **{"quota_wait_s": QUOTA_WAIT_S, **options})
        await runner.start()
        started.append((runner, bus))
        return runner

    try:
        await wait_for_services(config, ("engine", "project"), timeout=30)
        yield start
    finally:
        for runner, bus in started:
            await runner.stop()
            await bus.close()
        stop.set()
        await asyncio.wait_for(services, 30)


@pytest.fixture
async def signals(bus: Bus) -> AsyncIterator[Signals]:
    seen = Signals()
    sub = await bus.subscribe(subjects.signal_filter(), seen.on)
    await bus.nc.flush()
    yield seen
    await sub.unsubscribe()


class Executions:
    """How many calls a runner executes at once, per project and in all (a spy on its tool runs)."""

    def __init__(self, runner: ToolRunner) -> None:
        assert runner.pipeline is not None and runner.host is not None
        self.now: Counter[str] = Counter()
        self.most: Counter[str] = Counter()
        self.most_in_all = 0
        #: Request slots of the service host held at each start of a tool run.
        self.slots_held: list[int] = []
        host, running = runner.host, runner.pipeline.running
        execute = running.execute

        async def counting(key: CallKey, tool: Coroutine[Any, Any, ToolResult]) -> ToolResult:
            project = key[0]
            self.now[project] += 1
            self.most[project] = max(self.most[project], self.now[project])
            self.most_in_all = max(self.most_in_all, sum(self.now.values()))
            self.slots_held.append(host.inflight - host.waiting_released)
            try:
                return await execute(key, tool)
            finally:
                self.now[project] -= 1

        setattr(running, "execute", counting)  # noqa: B010  # a spy on the real method


def _of(request_id: str, *types: str) -> Callable[[Envelope], bool]:
    return lambda e: e.type in types and e.data["request_id"] == request_id


def _seen_any(signals: Signals, request_ids: set[str]) -> list[Envelope]:
    """Signals (started, completed, failed) of any of ``request_ids``."""
    return [e for e in signals.seen if e.data.get("request_id") in request_ids]


async def _until(cond: Callable[[], bool], timeout: float = 120.0) -> None:
    """Wait until ``cond()`` holds (the runner's or the client's state), bounded by ``timeout``."""

    async def loop() -> None:
        while not cond():  # noqa: ASYNC110  # white-box state, changed by messages in flight
            await asyncio.sleep(0.01)

    await asyncio.wait_for(loop(), timeout)


async def _sent_all(bus: Bus, before: int, count: int) -> None:
    """Until this connection has sent ``count`` more messages than ``before``, flushed to the server:
    a request it sends next reaches the runner after them (one connection, delivered in order)."""
    await _until(lambda: bus.nc.stats["out_msgs"] >= before + count)
    await bus.nc.flush()


async def _blocking_call(bus: Bus, signals: Signals, pid: str, rid: str) -> asyncio.Task[ToolResult]:
    """A call of ``pid`` that runs until cancelled, once it runs."""
    task = asyncio.create_task(
        run_tool(bus, pid, "bash", {"command": "sleep 900"}, request_id=rid, timeout=900)
    )
    await signals.wait(_of(rid, "tool.started"), 60)
    return task


async def _cancel(bus: Bus, pid: str, rid: str, call: asyncio.Task[ToolResult]) -> None:
    await ToolsClient(bus, pid).cancel(rid)
    assert failure(await asyncio.wait_for(call, 60)).type == "cancelled"


def _project_b(tmp_path: Path) -> Path:
    root = tmp_path / "b"
    root.mkdir()
    (root / "notes.txt").write_text("B's own notes\n")
    return root


async def test_300_queued_calls_of_one_project_leave_another_projects_read_file_served(
    bus: Bus, start_runner: Start, signals: Signals, tmp_path: Path
) -> None:
    runner = await start_runner()  # 256 request slots, as the service runs
    assert runner.pipeline is not None
    spy = Executions(runner)
    a = await start_project(bus, tmp_path / "a", ONE_AT_A_TIME)
    b = await start_project(bus, _project_b(tmp_path), {"permissions": {"allow": ["Read"]}})
    long = await _blocking_call(bus, signals, a, "long")

    before = bus.nc.stats["out_msgs"]
    queued_ids = {f"q{i}" for i in range(FLOOD)}
    queued = [
        asyncio.create_task(run_tool(bus, a, "list_dir", {}, request_id=rid, timeout=900))
        for rid in sorted(queued_ids)
    ]
    await _sent_all(bus, before, FLOOD)  # all of them are in front of B's call

    read = await run_tool(bus, b, "read_file", {"path": "notes.txt"}, request_id="b-read", timeout=60)
    assert read.ok and "B's own notes" in str(read.data), read
    # B was served while every queued call of A still waits: none has run, none has an answer
    assert not [t for t in queued if t.done()]
    assert _seen_any(signals, queued_ids) == []
    await _until(lambda: runner.pipeline is not None and runner.pipeline.quotas.queued == FLOOD)
    assert runner.pipeline.waiting.waiting(a) == FLOOD and spy.now[a] == 1

    await _cancel(bus, a, "long", long)
    results = await asyncio.wait_for(asyncio.gather(*queued), 600)
    assert all(r.ok for r in results), [failure(r) for r in results if not r.ok][:3]
    # the limits held: A ran one call at a time (its quota), never more than the runner's slots
    assert spy.most[a] == 1 and max(spy.slots_held) <= 256


def _received(runner: ToolRunner) -> int:
    """``run`` requests the runner took off the bus: handed to a task, or waiting at the door for a slot."""
    assert runner.host is not None and runner.host.service is not None
    return sum(e.num_requests for e in runner.host.service.stats().endpoints if e.name == "run")


class Gate:
    """A lock the test holds on a file of a project: a call running :attr:`command` runs until the
    test :meth:`opens <open>` the gate (a cancel would need a request slot: these calls hold them)."""

    def __init__(self, root: Path, name: str) -> None:
        path = root / f"{name}.lock"
        path.touch()
        self.command = f"flock {path.name} true"
        self._fd: int | None = os.open(path, os.O_RDONLY)
        fcntl.flock(self._fd, fcntl.LOCK_EX)

    def open(self) -> None:
        """Let the call through (once; again does nothing)."""
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)


async def test_a_waiting_call_holds_no_slot_and_the_slots_still_bound_what_runs(
    bus: Bus, start_runner: Start, signals: Signals, tmp_path: Path
) -> None:
    """Two request slots. A call queued behind its project's quota holds none (another project's
    call runs in it); a call that may go on waits for a slot like a new request, and never more
    calls run than the runner has slots."""
    runner = await start_runner(max_concurrent=2)
    assert runner.pipeline is not None and runner.host is not None
    pipeline, host = runner.pipeline, runner.host
    spy = Executions(runner)
    gated = {
        "permissions": {"allow": ["Bash(flock:*)"]},
        "tools": {"max_concurrent_per_project": 1, "timeout_s": 900},
    }
    a = await start_project(bus, tmp_path / "a", gated)
    c = await start_project(
        bus, tmp_path / "c", {**gated, "tools": {"max_concurrent_per_project": 2, "timeout_s": 900}}
    )
    gates = {
        rid: Gate(tmp_path / root, rid)
        for rid, root in (("long", "a"), ("q0", "a"), ("c0", "c"), ("c1", "c"))
    }

    def call(pid: str, rid: str) -> asyncio.Task[ToolResult]:
        command = gates[rid].command
        return asyncio.create_task(
            run_tool(bus, pid, "bash", {"command": command}, request_id=rid, timeout=900)
        )

    try:
        long = call(a, "long")  # one slot, and A's quota
        await signals.wait(_of("long", "tool.started"), 60)
        q0 = call(a, "q0")
        await _until(lambda: pipeline.waiting.waiting(a) == 1)  # queued behind A's quota
        c0 = call(c, "c0")  # runs in the other slot: q0 holds none
        await signals.wait(_of("c0", "tool.started"), 60)
        c1 = call(c, "c1")
        await _until(lambda: _received(runner) == 4)  # c1 waits at the door: both slots are taken
        assert host.inflight == 3 and spy.most_in_all == 2

        # A's quota goes to q0, the freed slot to c1 (first at the door); each gives the slot back
        # for a wait (its claim, its quota) and takes one again: one of them runs, the other waits
        gates["long"].open()
        assert (await asyncio.wait_for(long, 60)).ok
        ran = await signals.wait(
            lambda e: e.type == "tool.started" and e.data["request_id"] in {"q0", "c1"}, 60
        )
        other = "c1" if ran.data["request_id"] == "q0" else "q0"
        await _until(lambda: host.inflight == 3 and host.waiting_released == 1)  # other: no slot
        assert not [e for e in signals.seen if _of(other, "tool.started")(e)]

        gates["c0"].open()
        await signals.wait(_of(other, "tool.started"), 60)
    finally:
        for gate in gates.values():
            gate.open()
    results = await asyncio.wait_for(asyncio.gather(long, q0, c0, c1), 60)
    assert all(r.ok for r in results), results
    assert spy.most_in_all == 2 and spy.most[a] == 1 and max(spy.slots_held) <= 2


async def test_requests_sent_again_wait_for_the_first_attempt_holding_no_request_slot(
    bus: Bus, start_runner: Start, signals: Signals, tmp_path: Path
) -> None:
    """A caller that hears nothing sends the same call again (same request id: the conversation
    does, after 15 s); the copy waits for the first attempt's result. Two request slots: one runs
    the call, the copies hold none, so another project's read_file is served meanwhile."""
    runner = await start_runner(max_concurrent=2)
    assert runner.pipeline is not None
    pipeline = runner.pipeline
    a = await start_project(
        bus, tmp_path / "a", {"permissions": {"allow": ["Bash(flock:*)"]}, "tools": {"timeout_s": 900}}
    )
    b = await start_project(bus, _project_b(tmp_path), {"permissions": {"allow": ["Read"]}})
    gate = Gate(tmp_path / "a", "long")

    def attempt() -> asyncio.Task[ToolResult]:
        return asyncio.create_task(
            run_tool(bus, a, "bash", {"command": gate.command}, request_id="long", timeout=900)
        )

    try:
        first = attempt()
        await signals.wait(_of("long", "tool.started"), 60)
        before = bus.nc.stats["out_msgs"]
        again = [attempt() for _ in range(3)]
        await _sent_all(bus, before, len(again))  # in front of B's call
        read = await run_tool(bus, b, "read_file", {"path": "notes.txt"}, request_id="b-read", timeout=60)
        assert read.ok, read
        assert not first.done() and not [t for t in again if t.done()]
        await _until(lambda: pipeline.waiting.waiting(a) == 3)  # each waits for the first's result
    finally:
        gate.open()
    results = await asyncio.wait_for(asyncio.gather(first, *again), 60)
    assert all(r.ok for r in results) and all(r == results[0] for r in results), results
    assert len([e for e in signals.seen if _of("long", "tool.started")(e)]) == 1  # it ran once


async def test_a_full_queue_refuses_the_overflow_and_only_for_its_project(
    bus: Bus, start_runner: Start, signals: Signals, tmp_path: Path
) -> None:
    runner = await start_runner(max_queued_calls=3)
    assert runner.pipeline is not None
    a = await start_project(bus, tmp_path / "a", ONE_AT_A_TIME)
    b = await start_project(bus, _project_b(tmp_path), {"permissions": {"allow": ["Read"]}})
    long = await _blocking_call(bus, signals, a, "long")
    queued = [
        asyncio.create_task(run_tool(bus, a, "list_dir", {}, request_id=f"q{i}", timeout=900))
        for i in range(3)
    ]
    await _until(lambda: runner.pipeline is not None and runner.pipeline.waiting.waiting(a) == 3)

    refused = failure(await run_tool(bus, a, "list_dir", {}, request_id="q3", timeout=60))
    assert refused.type == "quota_exceeded"
    assert refused.details == {"scope": "project (calls waiting)", "limit": 3}
    assert "3 calls of its project wait already" in refused.message
    assert "JIDO_MAX_QUEUED_CALLS=3" in refused.message
    # another project is neither refused nor held up
    read = await run_tool(bus, b, "read_file", {"path": "notes.txt"}, request_id="b-read", timeout=60)
    assert read.ok, read
    assert not [t for t in queued if t.done()]

    await _cancel(bus, a, "long", long)
    results = await asyncio.wait_for(asyncio.gather(*queued), 120)
    assert all(r.ok for r in results), results
    assert runner.pipeline.waiting.total == 0


async def test_calls_waiting_for_a_projects_mcp_server_to_start_leave_another_project_served(
    bus: Bus,
    start_runner: Start,
    signals: Signals,
    tmp_path: Path,
    jido_home: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A trusted project's MCP server never finishes starting; its calls wait for it (up to the
    call's time), each of them once holding a request slot. Four slots, eight such calls."""
    monkeypatch.setenv(START_TIMEOUT_ENV, "300")
    (jido_home / "settings.json").write_text(
        json.dumps({"permissions": {"additional_directories": sandbox_readable()}})
    )
    root = tmp_path / "stuck"
    write_mcp_json(root, {"stuck": stdio(FLAKY, "--hang-on-start")})
    write_settings(root, {"permissions": {"allow": ["Read", "mcp__stuck"]}, "tools": {"timeout_s": 300}})
    trust_project(root, home=jido_home)
    runner = await start_runner(max_concurrent=4)
    assert runner.pipeline is not None
    a = await start_project(bus, root)
    b = await start_project(bus, _project_b(tmp_path), {"permissions": {"allow": ["Read"]}})

    before = bus.nc.stats["out_msgs"]
    waiting = [
        asyncio.create_task(
            run_tool(bus, a, "mcp__stuck__echo", {"text": "x"}, request_id=f"m{i}", timeout=300)
        )
        for i in range(8)
    ]
    await _sent_all(bus, before, len(waiting))
    read = await run_tool(bus, b, "read_file", {"path": "notes.txt"}, request_id="b-read", timeout=60)
    assert read.ok, read
    assert not [t for t in waiting if t.done()]
    assert _seen_any(signals, {f"m{i}" for i in range(8)}) == []
    await _until(lambda: runner.pipeline is not None and runner.pipeline.waiting.waiting(a) == 8)

    for task in waiting:  # the runner's stop ends the waits (its drain, then a cancel)
        task.cancel()
    await asyncio.gather(*waiting, return_exceptions=True)
