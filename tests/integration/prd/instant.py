"""An instant provider for the pure-loop tests: it answers at once, doing what the test scripted.

A script is a list of :class:`Act` per story id, one per attempt (the last one repeats): write or
delete files in the work dir, fail with a failure kind, or block until released (a step in
flight, for pause and stop). Every request is recorded, so a test can read the prompts.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

from jidocode.services.prd.providers.base import (
    FailureKind,
    IterationRequest,
    IterationResult,
    ProviderCapabilities,
    ProviderEvent,
)

__all__ = ["Act", "InstantProvider"]


@dataclass(frozen=True)
class Act:
    """What one attempt does."""

    write: dict[str, str] = field(default_factory=dict)
    delete: tuple[str, ...] = ()
    fail: FailureKind | None = None
    #: Wait for the provider's ``release`` event before finishing (cancel ends it).
    block: bool = False
    #: The assistant's text.
    say: str = "done"
    #: Whether the provider reports the story done (``None``: it has no such signal).
    done: bool | None = None
    #: What the iteration cost, reported in ``metadata.cost_usd`` (0: nothing reported).
    cost_usd: float = 0.0


class _Run:
    def __init__(self, provider: InstantProvider, request: IterationRequest, act: Act) -> None:
        self.provider = provider
        self.request = request
        self.act = act
        self.cancelled = asyncio.Event()
        self._result: IterationResult | None = None

    async def events(self) -> AsyncIterator[ProviderEvent]:
        yield ProviderEvent(kind="iteration_started")
        if self.act.block:
            self.provider.blocked.set()
            release = asyncio.ensure_future(self.provider.release.wait())
            cancel = asyncio.ensure_future(self.cancelled.wait())
            await asyncio.wait({release, cancel}, return_when=asyncio.FIRST_COMPLETED)
            release.cancel()
            cancel.cancel()
            if self.cancelled.is_set():
                self._result = IterationResult(ok=False, failure="cancelled", error="cancelled")
                return
        work = Path(self.request.work_dir)
        for name, text in self.act.write.items():
            (work / name).write_text(text)
            yield ProviderEvent(kind="tool_started", tool="write_file", call_id=name, input={"path": name})
            yield ProviderEvent(kind="tool_finished", tool="write_file", call_id=name, ok=True, text="ok")
        for name in self.act.delete:
            (work / name).unlink(missing_ok=True)
        if self.act.fail is not None:
            yield ProviderEvent(kind="error", text=f"scripted {self.act.fail} failure")
            self._result = IterationResult(ok=False, failure=self.act.fail, error=f"scripted {self.act.fail}")
            return
        yield ProviderEvent(kind="assistant_text", text=self.act.say, metadata={"native": "instant"})
        yield ProviderEvent(kind="iteration_finished", ok=True, text="done")
        metadata = {"cost_usd": f"{self.act.cost_usd:.6f}"} if self.act.cost_usd else {}
        self._result = IterationResult(ok=True, summary="done", done=self.act.done, metadata=metadata)

    async def result(self) -> IterationResult:
        assert self._result is not None, "events() not exhausted"
        return self._result

    async def cancel(self) -> None:
        self.provider.cancels += 1
        self.provider.cancelled.set()
        self.cancelled.set()


class InstantProvider:
    """``name()`` is ``instant``; ``scripts["<prd>/<story id>"]`` says what each attempt does."""

    def __init__(self) -> None:
        self.scripts: dict[str, list[Act]] = {}
        self.requests: list[IterationRequest] = []
        self.blocked = asyncio.Event()
        self.release = asyncio.Event()
        self.cancels = 0
        #: Set by every cancel of an iteration (a test clears it before it waits for one).
        self.cancelled = asyncio.Event()

    def name(self) -> str:
        return "instant"

    def capabilities(self) -> ProviderCapabilities:
        return ProviderCapabilities(streaming=True, tool_calls=True, sandbox_control=False)

    async def run_iteration(self, request: IterationRequest) -> _Run:
        key = f"{request.metadata.get('prd')}/{request.metadata.get('story_id')}"
        attempts = sum(
            1 for r in self.requests if f"{r.metadata.get('prd')}/{r.metadata.get('story_id')}" == key
        )
        self.requests.append(request)
        script = self.scripts.get(key) or [Act()]
        return _Run(self, request, script[min(attempts, len(script) - 1)])
