"""Collect signals from the bus in tests; wait on a predicate, never sleep."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from jidocode.shared.envelope import Envelope


class Signals:
    """Collects envelopes from a subject filter; wait for one matching a predicate."""

    def __init__(self) -> None:
        self.seen: list[Envelope] = []
        self._changed = asyncio.Condition()

    async def __call__(self, env: Envelope) -> None:
        async with self._changed:
            self.seen.append(env)
            self._changed.notify_all()

    async def wait(self, pred: Callable[[Envelope], bool], timeout: float = 30.0) -> Envelope:
        async def _find() -> Envelope:
            async with self._changed:
                while True:
                    for env in self.seen:
                        if pred(env):
                            return env
                    await self._changed.wait()

        return await asyncio.wait_for(_find(), timeout)
