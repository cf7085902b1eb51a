"""Eager starts (``shared/eager.py``): a coroutine runs at once as a real task, and only one
that suspends keeps a task of its own."""

from __future__ import annotations

import asyncio
import contextvars
from typing import Any

import pytest

from jidocode.shared.eager import EagerStarter

SCOPE: contextvars.ContextVar[str] = contextvars.ContextVar("scope", default="none")


class Hooks:
    """What a starter reports: the tasks started and ended, in order."""

    def __init__(self) -> None:
        self.started: list[asyncio.Task[Any]] = []
        self.ended: list[asyncio.Task[Any]] = []

    def start(self, starter: EagerStarter, coro: Any, name: str = "job") -> asyncio.Task[Any]:
        starter.start(coro, name=name, on_start=self.started.append, on_end=self.ended.append)
        return self.started[-1]


async def test_a_coroutine_that_does_not_suspend_ends_before_start_returns_and_makes_no_task() -> None:
    starter, hooks, ran = EagerStarter("t"), Hooks(), []

    async def quick(n: int) -> None:
        ran.append((n, asyncio.current_task()))

    before = len(asyncio.all_tasks())
    for n in range(20):
        hooks.start(starter, quick(n))
        assert ran[-1][0] == n  # already ran: no loop turn in between
    assert len(asyncio.all_tasks()) == before + 1  # one parked spare, whatever the count
    task = ran[0][1]
    assert task is not None and task is not asyncio.current_task()  # ran as a task of its own
    assert all(t is task for _, t in ran) and hooks.ended == hooks.started
    starter.close()
    await asyncio.wait_for(task, 10)  # a closed starter's spare ends
    assert len(asyncio.all_tasks()) == before


async def test_a_coroutine_that_suspends_carries_on_in_the_task_it_started_as() -> None:
    starter, hooks, gate = EagerStarter("t"), Hooks(), asyncio.Event()
    seen: list[asyncio.Task[Any] | None] = []

    async def waits() -> str:
        seen.append(asyncio.current_task())
        await gate.wait()
        seen.append(asyncio.current_task())
        return "done"

    task = hooks.start(starter, waits(), name="waiting-job")
    assert seen == [task] and not task.done() and task.get_name() == "waiting-job"
    assert hooks.ended == []
    gate.set()
    assert await asyncio.wait_for(task, 10) == "done"
    assert seen == [task, task] and hooks.ended == [task]
    # the next coroutine gets a new spare: the one handed over is the waiting one's now
    other = hooks.start(starter, asyncio.sleep(0))
    assert other is not task
    starter.close()


async def test_each_coroutine_runs_in_a_context_of_its_own() -> None:
    starter, hooks, gate = EagerStarter("t"), Hooks(), asyncio.Event()
    seen: list[str] = []

    async def scoped(name: str, wait: bool) -> None:
        seen.append(SCOPE.get())
        SCOPE.set(name)
        if wait:
            await gate.wait()
        seen.append(SCOPE.get())

    SCOPE.set("caller")
    hooks.start(starter, scoped("a", wait=False))
    waiting = hooks.start(starter, scoped("b", wait=True))
    hooks.start(starter, scoped("c", wait=False))
    gate.set()
    await asyncio.wait_for(waiting, 10)
    assert seen == ["caller", "a", "caller", "caller", "c", "b"]
    assert SCOPE.get() == "caller"  # nothing leaked into the caller's context
    starter.close()


async def test_a_timeout_taken_before_the_first_suspension_cancels_the_coroutine_not_its_caller() -> None:
    starter, hooks = EagerStarter("t"), Hooks()

    async def bounded() -> str:
        try:
            async with asyncio.timeout(0.05):
                await asyncio.Event().wait()
        except TimeoutError:
            return "timed out"
        return "not reached"

    task = hooks.start(starter, bounded())
    assert await asyncio.wait_for(task, 10) == "timed out"
    assert asyncio.current_task().cancelling() == 0  # type: ignore[union-attr]
    starter.close()


async def test_cancelling_a_handed_over_task_cancels_its_coroutine() -> None:
    starter, hooks, cleaned = EagerStarter("t"), Hooks(), asyncio.Event()

    async def forever() -> None:
        try:
            await asyncio.Event().wait()
        finally:
            cleaned.set()

    task = hooks.start(starter, forever())
    task.cancel()  # before the task has even resumed the coroutine
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, 10)
    assert cleaned.is_set() and hooks.ended == [task]
    starter.close()


async def test_a_coroutine_cancelling_its_own_task_eagerly_gets_the_cancellation() -> None:
    starter, hooks = EagerStarter("t"), Hooks()
    got: list[str] = []

    async def cancels_itself() -> None:
        asyncio.current_task().cancel()  # type: ignore[union-attr]
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            got.append("cancelled")
            raise

    async def quick() -> None:
        got.append("quick")

    task = hooks.start(starter, cancels_itself())
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, 10)
    assert got == ["cancelled"] and hooks.ended == [task]
    assert hooks.start(starter, quick()) is not task and got == ["cancelled", "quick"]
    starter.close()


async def test_an_eager_coroutine_that_cancels_its_task_and_ends_retires_the_spare() -> None:
    starter, hooks = EagerStarter("t"), Hooks()

    async def cancels_and_ends() -> None:
        asyncio.current_task().cancel()  # type: ignore[union-attr]

    first = hooks.start(starter, cancels_and_ends())
    second = hooks.start(starter, asyncio.sleep(0))
    assert second is not first  # the cancelled spare is not reused
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(first, 10)
    starter.close()


async def test_an_exception_raised_eagerly_reaches_the_caller_and_the_end_hook() -> None:
    starter, hooks = EagerStarter("t"), Hooks()

    async def fails() -> None:
        raise ValueError("bad request")

    with pytest.raises(ValueError, match="bad request"):
        hooks.start(starter, fails())
    assert hooks.ended == hooks.started
    starter.close()
