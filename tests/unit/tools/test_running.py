"""A replica's running calls: a cancel reaches a call before or while it executes (no bus)."""

from __future__ import annotations

import asyncio

import pytest

from jidocode.services.tool_runner.errors import CallCancelled
from jidocode.services.tool_runner.executor import Limits
from jidocode.services.tool_runner.forward import COMPOSITE_STEPS, forward_timeout
from jidocode.services.tool_runner.running import RunningCalls
from jidocode.shared.events.tools import ToolResult

KEY = ("P", "r1")


async def _ok() -> ToolResult:
    return ToolResult(ok=True, data="done")


async def test_execute_returns_the_tools_result() -> None:
    running = RunningCalls()
    with running.track(KEY):
        assert (await running.execute(KEY, _ok())).data == "done"


def test_cancel_of_a_call_not_handled_here_is_ignored() -> None:
    assert RunningCalls().cancel(KEY) is False


async def test_a_call_cancelled_before_it_executes_never_starts() -> None:
    running = RunningCalls()
    started = False

    async def tool() -> ToolResult:
        nonlocal started
        started = True
        return ToolResult(ok=True)

    with running.track(KEY):
        assert running.cancel(KEY) is True
        with pytest.raises(CallCancelled, match="the call was cancelled"):
            await running.execute(KEY, tool())
    assert not started


async def test_a_cancel_kills_the_executing_tool() -> None:
    running = RunningCalls()
    entered = asyncio.Event()
    killed = asyncio.Event()

    async def tool() -> ToolResult:
        entered.set()
        try:
            await asyncio.Event().wait()
        finally:
            killed.set()
        raise AssertionError("unreachable")

    with running.track(KEY):
        call = asyncio.create_task(running.execute(KEY, tool()))
        await entered.wait()
        assert running.cancel(KEY)
        with pytest.raises(CallCancelled):
            await call
    assert killed.is_set()


async def test_a_cancel_is_forgotten_once_the_call_ends() -> None:
    running = RunningCalls()
    with running.track(KEY):
        running.cancel(KEY)
    assert running.cancel(KEY) is False
    with running.track(KEY):  # the same key again (a new call): runs
        assert (await running.execute(KEY, _ok())).ok


async def test_a_stopped_handler_takes_its_tool_down() -> None:
    running = RunningCalls()
    entered = asyncio.Event()
    killed = asyncio.Event()

    async def tool() -> ToolResult:
        entered.set()
        try:
            await asyncio.Event().wait()
        finally:
            killed.set()
        raise AssertionError("unreachable")

    async def handler() -> ToolResult:
        with running.track(KEY):
            return await running.execute(KEY, tool())

    task = asyncio.create_task(handler())
    await entered.wait()
    task.cancel()  # shutdown, not a cancel of the call: the handler stays cancelled
    with pytest.raises(asyncio.CancelledError):
        await task
    assert killed.is_set()


def test_forward_timeout_gives_composite_tools_room_for_their_steps() -> None:
    limits = Limits(timeout_s=7)
    assert forward_timeout("run_command", limits) == 7
    assert forward_timeout("run_workflow", limits) == 7 * COMPOSITE_STEPS
    assert forward_timeout("invoke_skill", limits) == 7 * COMPOSITE_STEPS
