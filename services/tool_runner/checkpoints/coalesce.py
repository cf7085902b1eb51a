"""One snapshot of a project's tree serves every request made while the previous one ran.

Fifty conversations of one project each checkpoint their turn and record what their call left:
each would list and scan the whole tree, one after the other under the store's lock. A request
needs a snapshot *begun after it was made* (the tree as it is now, not as it was), so requests
made while a snapshot runs wait for the next one, which starts as soon as the running one ends
and serves them all: at most two snapshots of a project at a time, whatever the number asking.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Generic, TypeVar

__all__ = ["Coalesced"]

T = TypeVar("T")


class Coalesced(Generic[T]):
    """``await get(take)``: the result of a ``take()`` begun after the call, shared with every
    caller waiting for the same one."""

    def __init__(self) -> None:
        #: The next take's result, awaited by the callers that came since the last take began.
        self._next: asyncio.Future[T] | None = None
        self._runner: asyncio.Task[None] | None = None
        #: How many takes ran (tests and logs).
        self.takes = 0

    async def get(self, take: Callable[[], Awaitable[T]]) -> T:
        if self._next is None:
            self._next = asyncio.get_running_loop().create_future()
        wanted = self._next
        if self._runner is None or self._runner.done():
            self._runner = asyncio.get_running_loop().create_task(self._run(take))
        return await asyncio.shield(wanted)

    async def _run(self, take: Callable[[], Awaitable[T]]) -> None:
        while (wanted := self._next) is not None:
            self._next = None  # callers from now on wait for the take after this one
            self.takes += 1
            try:
                wanted.set_result(await take())
            except Exception as exc:  # every waiter of this take gets its error
                wanted.set_exception(exc)
                wanted.exception()  # retrieved: no "never retrieved" warning when nobody waits
