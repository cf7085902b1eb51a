"""The calls this replica is handling, and how a cancel reaches them.

A call is *active* from its project lookup to its result (:meth:`RunningCalls.track`),
so a cancel that arrives at any point is never missed; once it executes, its
tool runs in a task of its own (:meth:`RunningCalls.execute`) that a cancel
kills. A call cancelled before it executes never starts.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Coroutine, Iterator
from typing import Any

from jidocode.shared.errors import JidoError
from jidocode.shared.events.tools import ToolResult

from .call import CallKey
from .errors import CANCELLED, CallCancelled

__all__ = ["RunningCalls"]


class RunningCalls:
    """Active calls, their tool tasks, and the cancels they got (per replica)."""

    def __init__(self) -> None:
        self._active: set[CallKey] = set()
        #: The cancelled calls, and the message each one's result gives.
        self._cancelled: dict[CallKey, str] = {}
        self._tasks: dict[CallKey, asyncio.Task[ToolResult]] = {}

    @contextlib.contextmanager
    def track(self, key: CallKey) -> Iterator[None]:
        """Mark ``key`` active for the block (a cancel for it is recorded, and kills its tool)."""
        self._active.add(key)
        try:
            yield
        finally:
            self._cancelled.pop(key, None)
            self._active.discard(key)

    def of_project(self, project_id: str) -> list[CallKey]:
        """The active calls of ``project_id`` on this replica."""
        return [key for key in self._active if key[0] == project_id]

    def cancel(self, key: CallKey, reason: str = CANCELLED) -> bool:
        """Cancel ``key`` if this replica handles it (its result says ``reason``); whether it does."""
        if key not in self._active:
            return False  # another replica's call (or not started: the ledger stops it)
        self._cancelled.setdefault(key, reason)
        task = self._tasks.get(key)
        if task is not None:
            task.cancel()
        return True

    def cancel_all(self) -> None:
        """Shutdown: kill every running tool."""
        for task in list(self._tasks.values()):
            task.cancel()

    async def execute(self, key: CallKey, tool: Coroutine[Any, Any, ToolResult]) -> ToolResult:
        """Run ``tool`` in a task a cancel can kill; :class:`CallCancelled` when one did (or came first)."""
        if key in self._cancelled:  # no await between this check and the registration
            tool.close()
            raise CallCancelled(self._cancelled[key])
        task = asyncio.create_task(tool)
        self._tasks[key] = task
        try:
            return await task
        except asyncio.CancelledError:
            if key not in self._cancelled:
                # this handler itself is cancelled (shutdown): take the tool down with it
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, JidoError, OSError, TimeoutError):
                    await task
                raise
            raise CallCancelled(self._cancelled[key]) from None
        finally:
            self._tasks.pop(key, None)
