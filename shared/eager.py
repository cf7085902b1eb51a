"""Start coroutines eagerly: each runs at once, up to its first real suspension.

``asyncio.create_task`` only schedules a coroutine: it starts a turn of the
event loop later, and on Python 3.11 making, registering, stepping and
finishing a task is Python-level work on every service request. A request
that needs no I/O to answer (and the synchronous part of every request:
decode, validate, encode) pays it for nothing. Python 3.12's eager tasks
remove the turn; :class:`EagerStarter` removes the turn *and* the task for
coroutines that end without suspending, on 3.11 and later:

* the coroutine runs at once as a **spare task**, a real task parked on a
  future, which is :func:`asyncio.current_task` meanwhile: ``asyncio.timeout``,
  task groups and ``current_task`` bookkeeping see one task for the whole
  coroutine, whether it suspends or not;
* a coroutine that ends without suspending leaves the spare parked, ready
  for the next one (no task made);
* a coroutine that suspends is handed over to the spare, which becomes its
  task: it carries on from where it stopped, is cancelled like any task
  (a cancellation that came while the coroutine ran eagerly is delivered to
  it), and a new spare is made for the next coroutine;
* every coroutine runs in a context of its own (a copy of the starter's
  caller's), so context variables it sets stay with it.
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Callable, Coroutine, Generator
from dataclasses import dataclass
from types import TracebackType
from typing import Any

__all__ = ["EagerStarter"]

#: Called with the task a coroutine runs as: when it starts, and when it ends.
TaskHook = Callable[[asyncio.Task[Any]], object]


class EagerStarter:
    """Starts coroutines eagerly (one starter per owner, e.g. a service host)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._spare: _Spare | None = None

    def start(
        self, coro: Coroutine[Any, Any, Any], *, name: str, on_start: TaskHook, on_end: TaskHook
    ) -> None:
        """Run ``coro`` now, up to its first suspension, as a task (then named ``name``).

        ``on_start(task)`` is called before it runs; ``on_end(task)`` once it has ended
        (at once when it ended without suspending, else as the task's done callback).
        Must be called from the running loop.
        """
        spare = self._spare
        if spare is None:
            spare = _Spare.make(asyncio.get_running_loop(), self.name)
        self._spare = None  # not reused by a start() from inside this coroutine
        task = spare.task
        loop = spare.loop  # (a spare is used on its own loop only: a host serves on one loop)
        on_start(task)
        context = contextvars.copy_context()
        suspended, outcome = _step_as(loop, task, context, coro)
        if suspended:
            spare.take(_Job(coro, context, outcome))
            task.set_name(name)
            task.add_done_callback(on_end)
            return
        if not task.cancelling():  # cancelled from inside: it ends, a new spare comes next time
            self._spare = spare
        on_end(task)
        if isinstance(outcome, BaseException) and not isinstance(outcome, asyncio.CancelledError):
            raise outcome

    def close(self) -> None:
        """End the parked spare (a host that stops)."""
        spare, self._spare = self._spare, None
        if spare is not None:
            spare.release()


def _step_as(
    loop: asyncio.AbstractEventLoop,
    task: asyncio.Task[Any],
    context: contextvars.Context,
    coro: Coroutine[Any, Any, Any],
) -> tuple[bool, Any]:
    """Step ``coro`` once in ``context`` with ``task`` as the current task.

    ``(True, what it yielded)`` when it suspended, else ``(False, the exception it raised or None)``.
    """
    outer = asyncio.current_task(loop)
    if outer is not None:
        asyncio.tasks._leave_task(loop, outer)
    asyncio.tasks._enter_task(loop, task)
    try:
        return True, context.run(coro.send, None)
    except StopIteration:
        return False, None
    except BaseException as exc:
        if isinstance(exc, KeyboardInterrupt | SystemExit):
            raise
        return False, exc
    finally:
        asyncio.tasks._leave_task(loop, task)
        if outer is not None:
            asyncio.tasks._enter_task(loop, outer)


@dataclass(slots=True)
class _Job:
    """A coroutine that suspended in its eager step: its context and what it waits on."""

    coro: Coroutine[Any, Any, Any]
    context: contextvars.Context
    pending: Any


class _Spare(Coroutine[Any, Any, Any]):
    """What a spare task runs: parked on ``waiter`` until it is handed a job or released.

    Handed a job (:meth:`take`), it drives the job's coroutine, in the coroutine's own
    context, from where its eager step left it; released, it ends.
    """

    __slots__ = ("_job", "_started", "loop", "task", "waiter")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.waiter: asyncio.Future[None] = loop.create_future()
        self._job: _Job | None = None
        self._started = False  # the task resumed the job's coroutine
        self.task: asyncio.Task[Any]

    @classmethod
    def make(cls, loop: asyncio.AbstractEventLoop, name: str) -> _Spare:
        spare = cls(loop)
        spare.task = loop.create_task(spare, name=f"{name}-spare")
        return spare

    def take(self, job: _Job) -> None:
        """Carry on with ``job``: wake the task (unless the coroutine cancelled it: it then
        wakes with the cancellation, which goes into the coroutine)."""
        self._job = job
        if not self.waiter.done():
            self.waiter.set_result(None)

    def release(self) -> None:
        if not self.waiter.done():
            self.waiter.set_result(None)

    def send(self, value: Any) -> Any:
        job = self._job
        if job is None:
            if self.waiter.done():
                raise StopIteration(None)  # released
            self.waiter._asyncio_future_blocking = True  # park: what ``await waiter`` does
            return self.waiter
        if self._started:
            return job.context.run(job.coro.send, value)
        self._started = True
        return job.pending  # wait for what the coroutine waits for

    def throw(
        self,
        typ: type[BaseException] | BaseException,
        val: BaseException | object = None,
        tb: TracebackType | None = None,
    ) -> Any:
        exc = typ if isinstance(typ, BaseException) else typ()
        job = self._job
        if job is None:
            raise exc  # a parked spare cancelled (a loop shutting down): it ends
        self._started = True
        return job.context.run(job.coro.throw, exc)

    def close(self) -> None:
        if self._job is not None:
            self._job.coro.close()

    def __await__(self) -> Generator[Any, None, Any]:
        raise TypeError("a spare task's coroutine is driven by its task, not awaited")
