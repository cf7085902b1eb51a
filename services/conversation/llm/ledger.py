"""The token ledger (seed 003 ``TokenLedger``): usage totals per conversation and per project.

Pure core: :func:`accumulate` folds one ``llm.completed`` event into
:class:`~jidocode.shared.events.llm.UsageTotals`; ``combine``
(:mod:`jidocode.shared.ledger`) sums the totals of several conversations;
:func:`check_budget` says whether a conversation has used up its token or cost
budget.

Stores (the :class:`UsageStore` protocol): :class:`MemoryLedger` (one
process, the default of the port) and :class:`KvLedger` (JetStream KV bucket
``jido_llm_ledger``; one writer per conversation — its owning replica — so
updates rarely conflict, and a compare-and-set loop handles it when they do).
The key scheme and the reads are :class:`~jidocode.shared.ledger.LedgerReader`,
which the client SDK uses too; this module adds the writes.

:func:`bus_sink` publishes every llm.* event on ``jido.sig.<type>``. The
port records each call's ``llm.completed`` in its store (off the answer's path)
and checks the budget against it before each call: the conversation's own
totals plus those of its finished sub-agents (``with_subagents``, decision 0315).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Final, Protocol

import nats.js.errors

from jidocode.shared.bus import Bus
from jidocode.shared.events._base import EventModel
from jidocode.shared.events.llm import LlmBudgetExceeded, LlmCallCompleted, UsageTotals
from jidocode.shared.ledger import LedgerReader, combine, ledger_key

#: Publishes one llm.* event (the port adds no transport of its own).
EventSink = Callable[[EventModel], Awaitable[None]]

__all__ = [
    "EventSink",
    "KvLedger",
    "MemoryLedger",
    "UsageStore",
    "accumulate",
    "bus_sink",
    "check_budget",
]

_CAS_ATTEMPTS: Final = 10
_MAX_CACHED: Final = 10_000


def accumulate(totals: UsageTotals, event: LlmCallCompleted) -> UsageTotals:
    """``totals`` plus one call (pure). The context fields take the call's values."""
    return totals.model_copy(
        update={
            "project_id": event.project_id,
            "conversation_id": event.conversation_id,
            "calls": totals.calls + 1,
            "prompt_tokens": totals.prompt_tokens + event.prompt_tokens,
            "completion_tokens": totals.completion_tokens + event.completion_tokens,
            "cached_tokens": totals.cached_tokens + event.cached_tokens,
            "total_tokens": totals.total_tokens + event.total_tokens,
            "cost_usd": round(totals.cost_usd + (event.cost_usd or 0.0), 10),
            "unpriced_calls": totals.unpriced_calls + (1 if event.cost_usd is None else 0),
            "model": event.model,
            "context_tokens": event.prompt_tokens + event.completion_tokens,
            "context_window": event.context_window,
        }
    )


def check_budget(
    totals: UsageTotals, *, budget_tokens: int | None, budget_usd: float | None
) -> LlmBudgetExceeded | None:
    """The event to publish when ``totals`` reached a budget, else ``None`` (pure)."""
    over_tokens = budget_tokens is not None and totals.total_tokens >= budget_tokens
    over_usd = budget_usd is not None and totals.cost_usd >= budget_usd
    if not (over_tokens or over_usd):
        return None
    return LlmBudgetExceeded(
        project_id=totals.project_id,
        conversation_id=totals.conversation_id or "",
        used_tokens=totals.total_tokens,
        budget_tokens=budget_tokens,
        used_usd=totals.cost_usd,
        budget_usd=budget_usd,
    )


class UsageStore(Protocol):
    async def record(self, event: LlmCallCompleted) -> UsageTotals: ...

    async def conversation(self, project_id: str, conversation_id: str) -> UsageTotals: ...

    async def with_subagents(self, project_id: str, conversation_id: str) -> UsageTotals:
        """The conversation's totals plus its finished sub-agents' (what its budget counts)."""
        ...

    async def project(self, project_id: str) -> UsageTotals: ...


class MemoryLedger:
    """Totals in this process only."""

    def __init__(self) -> None:
        self._totals: dict[tuple[str, str], UsageTotals] = {}

    async def record(self, event: LlmCallCompleted) -> UsageTotals:
        key = (event.project_id, event.conversation_id)
        totals = accumulate(self._totals.get(key) or UsageTotals(), event)
        self._totals[key] = totals
        return totals

    async def conversation(self, project_id: str, conversation_id: str) -> UsageTotals:
        found = self._totals.get((project_id, conversation_id))
        return found or UsageTotals(project_id=project_id, conversation_id=conversation_id)

    async def with_subagents(self, project_id: str, conversation_id: str) -> UsageTotals:
        """Its own totals: sub-agents are accounted under their parent in the KV ledger only."""
        return await self.conversation(project_id, conversation_id)

    async def project(self, project_id: str) -> UsageTotals:
        return combine(project_id, (t for (p, _), t in self._totals.items() if p == project_id))


class KvLedger(LedgerReader):
    """Totals in the JetStream KV bucket ``jido_llm_ledger``: the shared reader plus :meth:`record`."""

    def __init__(self, bus: Bus) -> None:
        super().__init__(bus)
        #: Last known (totals, revision) per key: a conversation has one writer, so the
        #: compare-and-set usually succeeds without reading first.
        self._last: dict[str, tuple[UsageTotals, int]] = {}

    async def record(self, event: LlmCallCompleted) -> UsageTotals:
        kv = await self._bucket()
        key = ledger_key(event.project_id, event.conversation_id)
        cached = self._last.get(key)
        if cached is not None:
            totals = accumulate(cached[0], event)
            try:
                revision = await kv.update(key, totals.model_dump_json().encode(), last=cached[1])
                self._remember(key, totals, revision)
                return totals
            except nats.js.errors.KeyWrongLastSequenceError:
                self._last.pop(key, None)
        for _ in range(_CAS_ATTEMPTS):
            try:
                entry = await kv.get(key)
            except nats.js.errors.KeyNotFoundError:
                totals = accumulate(UsageTotals(), event)
                try:
                    revision = await kv.create(key, totals.model_dump_json().encode())
                    self._remember(key, totals, revision)
                    return totals
                except nats.js.errors.KeyWrongLastSequenceError:
                    continue
            current = UsageTotals.model_validate_json(entry.value or b"{}")
            totals = accumulate(current, event)
            try:
                revision = await kv.update(key, totals.model_dump_json().encode(), last=entry.revision)
                self._remember(key, totals, revision)
                return totals
            except nats.js.errors.KeyWrongLastSequenceError:
                continue
        raise RuntimeError(f"ledger: {key} kept changing under {_CAS_ATTEMPTS} attempts")

    def _remember(self, key: str, totals: UsageTotals, revision: int) -> None:
        if len(self._last) >= _MAX_CACHED and key not in self._last:
            self._last.pop(next(iter(self._last)))
        self._last[key] = (totals, revision)


def bus_sink(bus: Bus) -> EventSink:
    """Publish llm.* events on ``jido.sig.<type>`` with the project/conversation/correlation ids."""

    async def sink(event: EventModel) -> None:
        ext: dict[str, str] = {}
        for name in ("project_id", "conversation_id", "correlation_id"):
            value = getattr(event, name, None)
            if isinstance(value, str) and value:
                ext[name] = value
        await bus.emit(event, **ext)

    return sink
