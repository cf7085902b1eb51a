"""The tool runner over a real nats-server: authorize, run, signal, idempotency, ask, cancel, quotas."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path

import pytest

from jidocode.services.tool_runner.idempotency import ledger_key
from jidocode.shared import subjects
from jidocode.shared.bus import Bus
from jidocode.shared.clients import ProjectClient, ToolsClient
from jidocode.shared.envelope import Envelope
from jidocode.shared.errors import InvalidInput, NotFound
from jidocode.shared.events.conversation import ApprovalResponse
from tests.integration.tools.support import RunnerFactory, Signals, failure, run_tool, start_project


def _procs_with(marker: str) -> list[int]:
    """Pids of live processes whose command line contains ``marker``."""
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
            with open(f"/proc/{pid}/stat") as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if marker in cmd and state != "Z":
            found.append(int(pid))
    return found


async def _gone(marker: str) -> bool:
    """True once no live process carries ``marker`` (an orphan would live 60 s, far past the bound)."""

    async def poll() -> None:
        while _procs_with(marker):  # noqa: ASYNC110
            await asyncio.sleep(0.01)  # /proc has no change notification

    try:
        await asyncio.wait_for(poll(), 5)
    except TimeoutError:
        return False
    return True


async def test_read_file_allowed_and_signalled(
    bus: Bus, runners: RunnerFactory, signals: Signals, tmp_path: Path
) -> None:
    await runners()
    (tmp_path / "a.txt").write_text("one\ntwo\nthree\n")
    pid = await start_project(bus, tmp_path, {"permissions": {"allow": ["Read"]}})
    result = await run_tool(
        bus, pid, "read_file", {"path": "a.txt", "offset": 2, "limit": 1}, request_id="r1"
    )
    assert result.ok is True
    assert result.data["content"] == "two\n"
    await signals.wait(lambda e: e.type == "tool.started" and e.data["request_id"] == "r1")
    done = await signals.wait(lambda e: e.type == "tool.completed" and e.data["request_id"] == "r1")
    assert done.project_id == pid


async def test_denied_call_is_a_failed_result_and_signal(
    bus: Bus, runners: RunnerFactory, signals: Signals, tmp_path: Path
) -> None:
    await runners()
    pid = await start_project(bus, tmp_path, {"permissions": {"allow": ["Read"]}})
    result = await run_tool(bus, pid, "write_file", {"path": "x.txt", "content": "x"}, request_id="w1")
    assert failure(result).type == "permission_denied"
    assert not (tmp_path / "x.txt").exists()
    failed = await signals.wait(lambda e: e.type == "tool.failed" and e.data["request_id"] == "w1")
    assert failed.data["error"]["type"] == "permission_denied"


async def test_redelivered_request_runs_once(bus: Bus, runners: RunnerFactory, tmp_path: Path) -> None:
    await runners()
    await runners()  # two replicas share the queue group
    pid = await start_project(bus, tmp_path, {"permissions": {"allow": ["Bash(echo:*)"]}})
    args = {"command": "echo once >> log.txt"}
    first = await run_tool(bus, pid, "bash", args, request_id="same-id")
    second = await run_tool(bus, pid, "bash", args, request_id="same-id")
    assert first == second
    # concurrent duplicates too
    results = await asyncio.gather(
        *(run_tool(bus, pid, "bash", args, request_id="other-id") for _ in range(4))
    )
    assert all(r == results[0] for r in results)
    assert (tmp_path / "log.txt").read_text() == "once\nonce\n"


async def test_ask_approved_once_then_session(bus: Bus, runners: RunnerFactory, tmp_path: Path) -> None:
    await runners()
    pid = await start_project(
        bus,
        tmp_path,
        {"permissions": {"ask": ["Bash(echo:*)"]}, "tools": {"approval_timeout_s": 30}},
    )
    asked: asyncio.Queue[Envelope] = asyncio.Queue()

    async def on_out(env: Envelope) -> None:
        if env.type == "conversation.approval.requested":
            await asked.put(env)

    await bus.subscribe(subjects.conversation_out_filter(pid, "c1"), on_out)
    await bus.nc.flush()

    async def answer(decision: str) -> None:
        env = await asyncio.wait_for(asked.get(), 10)
        assert env.data["tool"] == "bash"
        await bus.publish(
            subjects.conversation_in(pid, "c1"),
            ApprovalResponse(request_id=env.data["request_id"], decision=decision),  # type: ignore[arg-type]
            project_id=pid,
            conversation_id="c1",
        )

    call = asyncio.create_task(
        run_tool(bus, pid, "bash", {"command": "echo hi"}, request_id="a1", conversation_id="c1")
    )
    await answer("approve_once")
    assert (await call).data["output"] == "hi\n"

    call = asyncio.create_task(
        run_tool(bus, pid, "bash", {"command": "echo hi"}, request_id="a2", conversation_id="c1")
    )
    await answer("deny")
    denied = await call
    assert failure(denied).type == "permission_denied"

    call = asyncio.create_task(
        run_tool(bus, pid, "bash", {"command": "echo hi"}, request_id="a3", conversation_id="c1")
    )
    await answer("approve_session")
    assert (await call).ok is True
    # remembered for this conversation: no question this time
    again = await run_tool(bus, pid, "bash", {"command": "echo hi"}, request_id="a4", conversation_id="c1")
    assert again.ok is True
    assert asked.empty()


async def test_ask_without_answer_is_denied(bus: Bus, runners: RunnerFactory, tmp_path: Path) -> None:
    await runners()
    pid = await start_project(
        bus, tmp_path, {"permissions": {"ask": ["Bash(echo:*)"]}, "tools": {"approval_timeout_s": 0.2}}
    )
    result = await run_tool(bus, pid, "bash", {"command": "echo hi"}, request_id="t1", conversation_id="c9")
    assert failure(result).type == "permission_denied"
    assert "no approval" in failure(result).message


async def test_ask_without_conversation_is_denied_clearly(
    bus: Bus, runners: RunnerFactory, tmp_path: Path
) -> None:
    await runners()
    pid = await start_project(bus, tmp_path, {"permissions": {"ask": ["Bash(echo:*)"]}})
    result = await run_tool(bus, pid, "bash", {"command": "echo hi"}, request_id="n1")
    assert "no conversation to ask" in failure(result).message


@pytest.mark.parametrize("replicas", [1, 2])
async def test_cancel_kills_the_running_call_on_whichever_replica(
    bus: Bus, runners: RunnerFactory, signals: Signals, tmp_path: Path, replicas: int
) -> None:
    for _ in range(replicas):
        await runners()
    marker = f"61.{os.getpid()}{replicas}7"
    pid = await start_project(bus, tmp_path, {"permissions": {"allow": ["Bash(sleep:*)"]}})
    call = asyncio.create_task(run_tool(bus, pid, "bash", {"command": f"sleep {marker}"}, request_id="long"))
    await signals.wait(lambda e: e.type == "tool.started" and e.data["request_id"] == "long")
    reply = await ToolsClient(bus, pid).cancel("long")
    assert reply.cancel_requested is True and reply.request_id == "long"
    result = await asyncio.wait_for(call, 20)
    assert failure(result).type == "cancelled"
    assert await _gone(f"sleep {marker}")


async def test_cancel_before_start_means_never_run(bus: Bus, runners: RunnerFactory, tmp_path: Path) -> None:
    await runners()
    pid = await start_project(bus, tmp_path, {"permissions": {"allow": ["Bash(echo:*)"]}})
    with pytest.raises(NotFound):  # no call has that id yet (issue 31): the cancel is kept all the same
        await ToolsClient(bus, pid).cancel("early")
    result = await run_tool(bus, pid, "bash", {"command": "echo x > ran.txt"}, request_id="early")
    assert failure(result).type == "cancelled"
    assert not (tmp_path / "ran.txt").exists()


async def test_conversation_quota_refuses_when_full(
    bus: Bus, runners: RunnerFactory, signals: Signals, tmp_path: Path
) -> None:
    await runners(quota_wait_s=0)
    pid = await start_project(
        bus,
        tmp_path,
        {
            "permissions": {"allow": ["Bash(sleep:*)", "Read"]},
            "tools": {"max_concurrent_per_conversation": 1},
        },
    )
    first = asyncio.create_task(
        run_tool(bus, pid, "bash", {"command": "sleep 62"}, request_id="q1", conversation_id="cq")
    )
    await signals.wait(lambda e: e.type == "tool.started" and e.data["request_id"] == "q1")
    second = await run_tool(bus, pid, "list_dir", {}, request_id="q2", conversation_id="cq")
    assert failure(second).type == "quota_exceeded"
    # another conversation is not affected
    other = await run_tool(bus, pid, "list_dir", {}, request_id="q3", conversation_id="other")
    assert other.ok is True
    await ToolsClient(bus, pid).cancel("q1", conversation_id="cq")
    assert failure(await asyncio.wait_for(first, 20)).type == "cancelled"


async def test_quota_waits_for_a_free_slot(
    bus: Bus, runners: RunnerFactory, signals: Signals, tmp_path: Path
) -> None:
    await runners(quota_wait_s=60)
    pid = await start_project(
        bus,
        tmp_path,
        {"permissions": {"allow": ["Bash(sleep:*)", "Read"]}, "tools": {"max_concurrent_per_project": 1}},
    )
    first = asyncio.create_task(run_tool(bus, pid, "bash", {"command": "sleep 63"}, request_id="w1"))
    await signals.wait(lambda e: e.type == "tool.started" and e.data["request_id"] == "w1")
    second = asyncio.create_task(run_tool(bus, pid, "list_dir", {}, request_id="w2"))
    await ToolsClient(bus, pid).cancel("w1")
    assert (await asyncio.wait_for(second, 20)).ok is True
    await first


async def test_bad_permission_rule_is_a_clear_error(bus: Bus, runners: RunnerFactory, tmp_path: Path) -> None:
    await runners()
    pid = await start_project(bus, tmp_path, {"permissions": {"allow": ["Bash(git:*"]}})
    result = await run_tool(bus, pid, "read_file", {"path": "x"}, request_id="b1")
    assert failure(result).type == "invalid_input"
    assert "unbalanced parentheses" in failure(result).message
    with pytest.raises(InvalidInput, match="unbalanced parentheses"):
        await ProjectClient(bus, pid).list_tools()


async def test_unknown_tool_and_oversize_args(bus: Bus, runners: RunnerFactory, tmp_path: Path) -> None:
    await runners()
    pid = await start_project(bus, tmp_path, {"permissions": {"allow": ["Read", "Edit"]}})
    unknown = await run_tool(bus, pid, "no_such_tool", {}, request_id="u1")
    assert failure(unknown).type == "not_found"
    big = await run_tool(bus, pid, "write_file", {"path": "b.txt", "content": "x" * 600_000}, request_id="u2")
    assert failure(big).type == "payload_too_large"
    assert not (tmp_path / "b.txt").exists()


async def test_catalog_is_policy_filtered(bus: Bus, runners: RunnerFactory, tmp_path: Path) -> None:
    pid = await start_project(bus, tmp_path, {"permissions": {"allow": ["Read"], "deny": ["Grep"]}})
    project = ProjectClient(bus, pid)
    specs = (await project.list_tools()).tools
    names = {s.name for s in specs}
    assert names == {"read_file", "list_dir", "glob", "web_fetch"}  # web_fetch: asked when no rule names it
    assert all(s.input_schema and s.description for s in specs)
    every = (await project.list_tools(include_hidden=True)).tools
    assert {"bash", "write_file", "edit_file", "grep"} <= {s.name for s in every}
    summary = await project.policy()
    assert summary.allow == ["Read"] and summary.default == "deny"
    assert summary.root == os.path.realpath(tmp_path)
    assert summary.limits["timeout_s"] == 30.0


async def test_claim_of_a_dead_replica_is_reported_not_rerun(
    bus: Bus, runners: RunnerFactory, tmp_path: Path
) -> None:
    await runners()
    pid = await start_project(bus, tmp_path, {"permissions": {"allow": ["Bash(echo:*)"]}})
    kv = await bus.kv(subjects.BUCKET_TOOL_CALLS)
    stale = {"state": "running", "instance": "tool_runner/dead", "name": "bash", "at": 0.0}
    await kv.put(ledger_key(pid, "crashed"), json.dumps(stale).encode())
    result = await run_tool(bus, pid, "bash", {"command": "echo x > ran.txt"}, request_id="crashed")
    assert failure(result).type == "outcome_unknown"
    assert not (tmp_path / "ran.txt").exists()
    again = await run_tool(bus, pid, "bash", {"command": "echo x > ran.txt"}, request_id="crashed")
    assert again == result


async def test_cancel_while_waiting_for_approval(bus: Bus, runners: RunnerFactory, tmp_path: Path) -> None:
    await runners()
    pid = await start_project(
        bus, tmp_path, {"permissions": {"ask": ["Bash(echo:*)"]}, "tools": {"approval_timeout_s": 60}}
    )
    asked: asyncio.Queue[Envelope] = asyncio.Queue()

    async def on_out(env: Envelope) -> None:
        await asked.put(env)

    await bus.subscribe(subjects.conversation_out_filter(pid, "cc"), on_out)
    await bus.nc.flush()
    call = asyncio.create_task(
        run_tool(bus, pid, "bash", {"command": "echo x > ran.txt"}, request_id="ca", conversation_id="cc")
    )
    await asyncio.wait_for(asked.get(), 10)
    await ToolsClient(bus, pid).cancel("ca", conversation_id="cc")
    result = await asyncio.wait_for(call, 20)
    assert failure(result).type == "cancelled"
    assert not (tmp_path / "ran.txt").exists()


async def test_cancel_while_waiting_for_a_slot(
    bus: Bus, runners: RunnerFactory, signals: Signals, tmp_path: Path
) -> None:
    runner = await runners(quota_wait_s=60)
    pid = await start_project(
        bus,
        tmp_path,
        {
            "permissions": {"allow": ["Bash(sleep:*)", "Bash(echo:*)"]},
            "tools": {"max_concurrent_per_project": 1},
        },
    )
    first = asyncio.create_task(run_tool(bus, pid, "bash", {"command": "sleep 64"}, request_id="s1"))
    await signals.wait(lambda e: e.type == "tool.started" and e.data["request_id"] == "s1")
    second = asyncio.create_task(run_tool(bus, pid, "bash", {"command": "echo x > ran.txt"}, request_id="s2"))

    async def queued() -> None:
        assert runner.pipeline is not None
        while not runner.pipeline.quotas.queued:  # noqa: ASYNC110  # white-box: the call reached the queue
            await asyncio.sleep(0.01)

    await asyncio.wait_for(queued(), 10)
    await ToolsClient(bus, pid).cancel("s2")
    assert failure(await asyncio.wait_for(second, 20)).type == "cancelled"
    assert not (tmp_path / "ran.txt").exists()
    await ToolsClient(bus, pid).cancel("s1")
    assert failure(await asyncio.wait_for(first, 20)).type == "cancelled"
