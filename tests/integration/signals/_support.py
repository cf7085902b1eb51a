"""Watch ``jido.sig.>`` in the seed-signal tests: collect in order, wait on a predicate (never sleep)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from jidocode.shared import subjects
from jidocode.shared.bus import Bus
from jidocode.shared.envelope import Envelope


class SignalLog:
    """Every signal seen on ``jido.sig.>``, in arrival order."""

    def __init__(self) -> None:
        self.seen: list[Envelope] = []
        self._changed = asyncio.Condition()

    @classmethod
    async def follow(cls, bus: Bus) -> SignalLog:
        log = cls()
        await bus.subscribe(subjects.signal_filter(), log._on)
        await bus.nc.flush()
        return log

    async def _on(self, env: Envelope) -> None:
        async with self._changed:
            self.seen.append(env)
            self._changed.notify_all()

    def of(self, event_type: str, pred: Callable[[Envelope], bool] = lambda _: True) -> list[Envelope]:
        return [e for e in self.seen if e.type == event_type and pred(e)]

    async def wait(
        self, event_type: str, pred: Callable[[Envelope], bool] = lambda _: True, timeout: float = 30.0
    ) -> Envelope:
        """The first ``event_type`` signal matching ``pred`` (waiting up to ``timeout`` seconds for it)."""

        async def _find() -> Envelope:
            async with self._changed:
                await self._changed.wait_for(lambda: bool(self.of(event_type, pred)))
                return self.of(event_type, pred)[0]

        return await asyncio.wait_for(_find(), timeout)
