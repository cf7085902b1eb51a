"""The llm.* telemetry of one model call (seed 000 §6): its ids, its coalesced text.

:class:`CallSignals` is made by the adapter for each ``complete``; it publishes,
through the port's sink, ``llm.started``, the ``llm.delta`` signals
(:mod:`.deltas`), ``llm.completed`` and ``llm.failed``, each with the call's
``call_id``. A lost signal never fails the call (the sink given logs it).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from jidocode.services.conversation.ports import LlmRequest, LlmResult
from jidocode.shared.envelope import new_id
from jidocode.shared.events import llm as llm_events

from .deltas import DeltaCoalescer
from .ledger import EventSink

__all__ = ["CallSignals"]


def _request_id(request: LlmRequest) -> str | None:
    """The conversation's id of the request (``LlmRequest.request_id``), when it has one."""
    value = getattr(request, "request_id", None)
    return value if isinstance(value, str) and value else None


class CallSignals:
    """The llm.* telemetry of one call: its ids, its coalesced deltas."""

    def __init__(
        self,
        request: LlmRequest,
        *,
        emit: EventSink,
        clock: Callable[[], float],
        interval_s: float,
        max_chars: int,
    ) -> None:
        self.request = request
        self._emit = emit
        self._clock = clock
        self.call_id = new_id()
        self.request_id = _request_id(request)
        self.deltas = DeltaCoalescer(interval_s=interval_s, max_chars=max_chars)
        self.sent = 0
        #: Attempts made so far (the first and its retries).
        self.attempts = 1

    def ids(self) -> dict[str, Any]:
        r = self.request
        return {
            "project_id": r.project_id,
            "conversation_id": r.conversation_id,
            "correlation_id": r.correlation_id,
            "call_id": self.call_id,
        }

    async def started(self, model: str, tools: int) -> None:
        await self._emit(
            llm_events.LlmCallStarted(
                **self.ids(),
                request_id=self.request_id,
                model=model,
                messages=len(self.request.messages),
                tools=tools,
            )
        )

    async def text(self, piece: str) -> None:
        for text in self.deltas.add(piece, self._clock()):
            await self._delta(text)

    async def flush(self) -> None:
        rest = self.deltas.flush()
        if rest is not None:
            await self._delta(rest)

    async def _delta(self, text: str) -> None:
        await self._emit(
            llm_events.LlmCallDelta(**self.ids(), request_id=self.request_id, seq=self.sent, text=text)
        )
        self.sent += 1

    async def failed(self, error_type: str, message: str, *, model: str | None, attempts: int) -> None:
        await self.flush()
        await self._emit(
            llm_events.LlmCallFailed(
                **self.ids(),
                request_id=self.request_id,
                model=model,
                error_type=error_type,
                message=message,
                attempts=attempts,
            )
        )

    def completion(
        self, result: LlmResult, *, model: str, duration_ms: float, retries: int, context_window: int
    ) -> llm_events.LlmCallCompleted:
        """The call's ``llm.completed``: its usage and cost (the ledger's input), after its deltas."""
        usage = result.usage
        return llm_events.LlmCallCompleted(
            **self.ids(),
            request_id=self.request_id,
            model=model,
            finish_reason=result.finish_reason,
            prompt_tokens=usage.prompt_tokens,
            completion_tokens=usage.completion_tokens,
            cached_tokens=usage.cached_tokens,
            total_tokens=usage.total_tokens,
            cost_usd=usage.cost_usd,
            duration_ms=duration_ms,
            retries=retries,
            content_chars=len(result.content),
            tool_calls=len(result.tool_calls),
            deltas=self.sent,
            context_window=context_window,
        )
