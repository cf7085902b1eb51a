"""A provider run's cancel: the producer's clean-up runs however early the cancel comes."""

from __future__ import annotations

import asyncio

from jidocode.services.prd.providers.base import IterationResult
from jidocode.services.prd.providers.channel import ChannelRun


class _Run(ChannelRun):
    """A producer that waits until cancelled, then cleans up (as a CLI's kills its process)."""

    def __init__(self) -> None:
        super().__init__()
        self.cleaned_up = False

    def start(self) -> None:
        self._task = asyncio.create_task(self._produce())

    async def _produce(self) -> None:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            pass  # the run ends as cancelled, as the providers' producers do
        finally:
            self.cleaned_up = True
            self._result = IterationResult(ok=False, failure="cancelled")
            await self._channel.close()


async def test_a_cancel_right_after_the_start_still_runs_the_producers_clean_up() -> None:
    run = _Run()
    run.start()
    await run.cancel()  # before the producer took a step: it must still run its finally
    assert run.cleaned_up
    assert [ev async for ev in run.events()] == []  # the events end
    assert (await run.result()).failure == "cancelled"
    await run.cancel()  # again: nothing more to do
