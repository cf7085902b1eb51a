"""Availability (issue 11, item 6): waiting humans and runaway workflows cannot take the system down.

* A call waiting for an approval holds no request slot of the tool runner (``ServiceHost.released``),
  so 300 of them in one project leave another project's calls served; the waits are bounded per
  project instead.
* A workflow has one step budget per top-level call (nested workflows included, inline or as tool
  steps) and stops when its caller stops: past the caller's deadline, or once it cancelled.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from jidocode.services.asset_loader.runtime import StepBudgetExceeded, StepBudgets
from jidocode.shared import subjects
from jidocode.shared.bus import Bus
from jidocode.shared.clients import ToolsClient
from jidocode.shared.envelope import Envelope, encode
from jidocode.shared.errors import RequestTimeout
from jidocode.shared.events.assets import WorkflowRunFailed, WorkflowRunStep
from jidocode.shared.events.conversation import ApprovalRequested, ApprovalResponse
from jidocode.shared.events.tools import RunTool, ToolCallMeta, ToolResult
from jidocode.shared.service import ServiceHost

from .bus_system import SecureSystem, Seen, failure, secure_system, watch

TOOL_SERVICES = ("engine", "project", "asset_loader", "tool_runner")


def _project(tmp_path: Path, name: str, settings: dict[str, Any]) -> Path:
    root = tmp_path / name
    (root / ".jido").mkdir(parents=True)
    (root / ".jido" / "settings.json").write_text(json.dumps(settings))
    return root


# -- approvals hold no request slot ------------------------------------------------------------------


async def _flood(
    system: SecureSystem, pid: str, count: int, cid: str = "flood"
) -> tuple[list[asyncio.Task[ToolResult]], Seen]:
    asked = await watch(system.client, subjects.conversation_out_filter(pid, cid))
    calls = [
        asyncio.create_task(
            system.run(
                pid,
                "bash",
                {"command": f"touch asked{i}"},
                request_id=f"a{i}",
                conversation_id=cid,
                timeout=120,
            )
        )
        for i in range(count)
    ]
    return calls, asked


async def _deny_all(system: SecureSystem, pid: str, asked: Seen, cid: str = "flood") -> None:
    for env in [e for e in asked.items if e.type == ApprovalRequested.TYPE]:
        answer = ApprovalResponse(request_id=str((env.data or {})["request_id"]), decision="deny")
        await system.client.publish(subjects.conversation_in(pid, cid), answer)


async def test_300_calls_waiting_for_approval_do_not_block_another_project(
    tmp_path: Path, jido_home: Path
) -> None:
    ask = {"permissions": {"ask": ["Bash(touch:*)"]}, "tools": {"approval_timeout_s": 300}}
    flooded = _project(tmp_path, "flooded", ask)
    other = _project(tmp_path, "other", {"permissions": {"allow": ["Bash(touch:*)"]}})
    async with secure_system(tmp_path / "sys", jido_home, TOOL_SERVICES) as system:
        pid = await system.start_project(flooded)
        calls, asked = await _flood(system, pid, 300)
        is_question = lambda e: e.type == ApprovalRequested.TYPE  # noqa: E731
        await asked.wait(lambda _e: asked.count(is_question) >= 300, timeout=120)
        # 300 > the runner's 256 request slots: the other project's call is still served
        other_pid = await system.start_project(other)
        served = await system.run(
            other_pid, "bash", {"command": "touch served.txt"}, request_id="b1", timeout=20
        )
        assert served.ok, served
        assert (other / "served.txt").exists()
        await _deny_all(system, pid, asked)
        results = await asyncio.wait_for(asyncio.gather(*calls), 120)
        assert {failure(r).type for r in results} == {"permission_denied"}
        assert not list(flooded.glob("asked*"))


async def test_waiting_approvals_are_bounded_per_project(
    tmp_path: Path, jido_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("JIDO_MAX_PENDING_APPROVALS", "3")
    ask = {"permissions": {"ask": ["Bash(touch:*)"]}, "tools": {"approval_timeout_s": 300}}
    one, two = _project(tmp_path, "one", ask), _project(tmp_path, "two", ask)
    async with secure_system(tmp_path / "sys", jido_home, TOOL_SERVICES) as system:
        pid = await system.start_project(one)
        calls, asked = await _flood(system, pid, 3)
        await asked.wait(lambda _e: asked.count(lambda e: e.type == ApprovalRequested.TYPE) >= 3)
        fourth = await system.run(
            pid, "bash", {"command": "touch fourth"}, request_id="a3", conversation_id="flood", timeout=20
        )
        assert failure(fourth).type == "quota_exceeded" and failure(fourth).details["limit"] == 3
        assert asked.count(lambda e: e.type == ApprovalRequested.TYPE) == 3  # it never asked
        # the bound is per project: another project still asks
        other_pid = await system.start_project(two)
        other_calls, other_asked = await _flood(system, other_pid, 1, cid="c2")
        await other_asked.wait(lambda e: e.type == ApprovalRequested.TYPE)
        await _deny_all(system, pid, asked)
        await _deny_all(system, other_pid, other_asked, cid="c2")
        for result in await asyncio.wait_for(asyncio.gather(*calls, *other_calls), 60):
            assert failure(result).type == "permission_denied"
        assert not list(one.glob("*fourth*")) and not list(one.glob("asked*"))


@pytest.fixture
async def tiny_host(bus: Bus) -> AsyncIterator[tuple[ServiceHost, asyncio.Event, list[str]]]:
    """A host with ONE request slot; a request named ``wait_…`` waits for the gate, released or not
    (``done`` lists the requests answered, and ``"entered"`` once a wait began)."""
    host = ServiceHost(bus, name="tool_runner", max_concurrent=1)
    gate = asyncio.Event()
    done: list[str] = []
    entered = asyncio.Event()

    async def handler(cmd: RunTool, _env: object) -> ToolResult:
        entered.set()
        if cmd.name == "wait_released":
            async with host.released():
                await gate.wait()
        elif cmd.name == "wait_holding":
            await gate.wait()
        done.append(cmd.name)
        return ToolResult(ok=True, data=cmd.name)

    host.endpoint(RunTool, subjects.tools_pattern("run"), handler, name="run")  # type: ignore[arg-type]
    await host.start()
    host.entered = entered  # type: ignore[attr-defined]
    try:
        yield host, gate, done
    finally:
        gate.set()
        await host.stop()


async def _call(bus: Bus, name: str, timeout: float) -> ToolResult:
    meta = ToolCallMeta(request_id=name)
    return await ToolsClient(bus, "p1").run(name, {}, meta=meta, timeout=timeout)


async def test_a_released_slot_serves_other_requests_meanwhile(
    bus: Bus, tiny_host: tuple[ServiceHost, asyncio.Event, list[str]]
) -> None:
    host, gate, done = tiny_host
    waiting = asyncio.create_task(_call(bus, "wait_released", 30))
    await asyncio.wait_for(host.entered.wait(), 10)  # type: ignore[attr-defined]
    assert (await _call(bus, "quick", 10)).data == "quick"  # its one slot was given back
    assert host.inflight == 1 and host.waiting_released == 1
    gate.set()
    assert (await asyncio.wait_for(waiting, 10)).data == "wait_released"
    assert done == ["quick", "wait_released"]


async def test_a_held_slot_blocks_other_requests(
    bus: Bus, tiny_host: tuple[ServiceHost, asyncio.Event, list[str]]
) -> None:
    """Control: the same wait without ``released()`` keeps the only slot (and ``released()``
    outside a request, which does nothing, did not make a second one)."""
    host, gate, done = tiny_host
    async with host.released():
        assert host.waiting_released == 0
    waiting = asyncio.create_task(_call(bus, "wait_holding", 30))
    await asyncio.wait_for(host.entered.wait(), 10)  # type: ignore[attr-defined]
    with pytest.raises(RequestTimeout):
        await _call(bus, "quick", 1.5)
    assert done == []
    gate.set()
    await asyncio.wait_for(waiting, 10)


# -- workflows stop ------------------------------------------------------------------------------


def _workflows(root: Path, chain: dict[str, list[dict[str, Any]]]) -> None:
    folder = root / ".jido" / "workflows"
    folder.mkdir(parents=True, exist_ok=True)
    for name, steps in chain.items():
        (folder / f"{name}.yaml").write_text(json.dumps({"steps": steps}))
    commands = root / ".jido" / "commands"
    commands.mkdir(parents=True, exist_ok=True)
    (commands / "c.md").write_text("---\ndescription: a step\n---\nstep\n")


@pytest.fixture
async def assets_system(tmp_path: Path, jido_home: Path) -> AsyncIterator[SecureSystem]:
    async with secure_system(tmp_path / "sys", jido_home, TOOL_SERVICES) as system:
        yield system


async def _steps_and_end(system: SecureSystem) -> tuple[Seen, Seen]:
    steps = await watch(system.client, subjects.signal(WorkflowRunStep.TYPE))
    failed = await watch(system.client, subjects.signal(WorkflowRunFailed.TYPE))
    return steps, failed


async def test_a_5x200_workflow_chain_stops_at_the_step_budget(
    assets_system: SecureSystem, tmp_path: Path
) -> None:
    system = assets_system
    root = _project(tmp_path, "chain", {"permissions": {"allow": ["run_workflow"]}})
    chain = {f"w{i}": [{"id": f"s{j}", "workflow": f"w{i + 1}"} for j in range(200)] for i in range(1, 5)}
    chain["w5"] = [{"id": f"s{j}", "command": "c"} for j in range(200)]
    _workflows(root, chain)
    pid = await system.start_project(root)
    steps, failed = await _steps_and_end(system)
    result = await system.run(pid, "run_workflow", {"name": "w1"}, request_id="chain", timeout=60)
    assert failure(result).type == "step_budget_exceeded"
    await failed.wait(lambda e: (e.data or {}).get("workflow") == "w1")
    assert 190 <= len(steps.items) <= 205  # 200 steps in all (of 200**5), plus the failed parents'


async def test_workflows_run_as_tool_steps_share_the_budget(
    tmp_path: Path, jido_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("JIDO_WORKFLOW_STEP_BUDGET", "30")
    root = _project(tmp_path, "tools", {"permissions": {"allow": ["run_workflow"]}})
    _workflows(
        root,
        {
            "outer": [{"id": f"t{j}", "tool": "run_workflow", "args": {"name": "inner"}} for j in range(10)],
            "inner": [{"id": f"s{j}", "command": "c"} for j in range(10)],
        },
    )
    async with secure_system(tmp_path / "sys", jido_home, TOOL_SERVICES) as system:
        pid = await system.start_project(root)
        steps, failed = await _steps_and_end(system)
        result = await system.run(pid, "run_workflow", {"name": "outer"}, request_id="nested", timeout=60)
        assert failure(result).type == "step_budget_exceeded"
        await failed.wait(lambda e: (e.data or {}).get("workflow") == "outer")
        assert len(steps.items) <= 32  # 30 (of 110), plus the failed tool step


SLOW = {"permissions": {"allow": ["run_workflow", "Bash(sleep:*)"]}}


def _slow_workflow(root: Path) -> None:
    _workflows(
        root,
        {"slow": [{"id": f"s{j}", "tool": "bash", "args": {"command": "sleep 0.25"}} for j in range(40)]},
    )


async def test_a_workflow_stops_when_its_caller_stops_waiting(
    assets_system: SecureSystem, tmp_path: Path
) -> None:
    system = assets_system
    root = _project(tmp_path, "slow", SLOW)
    _slow_workflow(root)
    pid = await system.start_project(root)
    steps, failed = await _steps_and_end(system)
    with pytest.raises(RequestTimeout):
        await system.run(pid, "run_workflow", {"name": "slow"}, request_id="gaveup", timeout=2.0)
    end = await failed.wait(lambda e: (e.data or {}).get("workflow") == "slow", timeout=30)
    assert (end.data or {})["error"]["type"] == "timeout"
    assert len(steps.items) < 20  # of 40: it stopped with its caller, not after the last step


async def test_a_workflow_stops_when_its_caller_cancels(assets_system: SecureSystem, tmp_path: Path) -> None:
    system = assets_system
    root = _project(tmp_path, "slow", SLOW)
    _slow_workflow(root)
    pid = await system.start_project(root)
    steps, failed = await _steps_and_end(system)
    call = asyncio.create_task(
        system.run(pid, "run_workflow", {"name": "slow"}, request_id="wfc", timeout=60)
    )
    await steps.wait(lambda e: True)
    accepted = await ToolsClient(system.client, pid).cancel("wfc")
    assert accepted.cancel_requested
    assert failure(await asyncio.wait_for(call, 30)).type == "cancelled"
    end = await failed.wait(lambda e: (e.data or {}).get("workflow") == "slow", timeout=30)
    assert (end.data or {})["error"]["type"] == "cancelled"
    assert len(steps.items) < 20


# -- the pure parts ----------------------------------------------------------------------------------


def test_step_budget_is_shared_by_nested_runs_and_freed_after() -> None:
    budgets = StepBudgets(3)
    with budgets.run("r"):
        budgets.take("r")
        with budgets.run("r"):  # a nested run of the same call
            budgets.take("r")
            budgets.take("r")
            with pytest.raises(StepBudgetExceeded):
                budgets.take("r")
        with pytest.raises(StepBudgetExceeded):
            budgets.take("r")
        budgets.stop("r")
        assert budgets.stopped("r")
    assert budgets.used("r") == 0 and not budgets.stopped("r")  # nothing kept once the call ended


@pytest.mark.parametrize(
    ("request_id", "root"),
    [
        ("p:c:7", "p:c:7"),
        ("p:c:7/wf/01J/s1", "p:c:7"),
        ("p:c:7/wf/01J/s1/skill/pdf/extract", "p:c:7"),
        ("r/skill/x/y/wf/1/s", "r"),
        ("/wf/x", "/wf/x"),  # no root before the marker: its own root
    ],
)
def test_root_request_id(request_id: str, root: str) -> None:
    assert ToolCallMeta(request_id=request_id).root_request_id == root


async def test_the_client_sends_its_deadline(bus: Bus) -> None:
    """``ToolsClient.run`` turns its timeout into ``meta.deadline`` (kept when the caller's is sooner)."""
    seen: list[dict[str, Any]] = []

    async def _runner(msg: Any) -> None:
        seen.append(json.loads(msg.data)["data"]["meta"])
        await msg.respond(encode(Envelope.new(ToolResult(ok=True), source="test/tools"))[0])

    await bus.nc.subscribe(subjects.tools("p1", "run"), cb=_runner)
    await bus.nc.flush()
    before = time.time()
    await ToolsClient(bus, "p1").run("x", {}, meta=ToolCallMeta(request_id="r1"), timeout=7)
    assert before + 7 <= seen[0]["deadline"] <= time.time() + 7
    sooner = ToolCallMeta(request_id="r2", deadline=before + 1)
    await ToolsClient(bus, "p1").run("x", {}, meta=sooner, timeout=7)
    assert seen[1]["deadline"] == before + 1
