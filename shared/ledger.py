"""Reading the token ledger: usage totals per conversation, in the KV bucket ``jido_llm_ledger``.

Key scheme: ``<project_id>.<conversation_id>`` (:func:`ledger_key`); value: the
conversation's :class:`~jidocode.shared.events.llm.UsageTotals` as JSON. A
project's totals are the sum over its keys (:func:`combine`). A finished
sub-agent's totals (its own sub-agents' included) are also written under its
parent (:func:`subagent_key`, decision 0253): a conversation's ``usage`` shows
them (:func:`with_subagents_usage`, decision 0315) and its budget counts them.

The conversation service's LLM port writes the bucket
(``services/conversation/llm/ledger.py``, ``KvLedger`` builds on
:class:`LedgerReader`); the client SDK reads it through :class:`LedgerReader`.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any, Final

import nats.js.errors
from nats.js.kv import KeyValue

from jidocode.shared import subjects
from jidocode.shared.bus import Bus
from jidocode.shared.events.llm import UsageTotals
from jidocode.shared.kv_keys import kv_values

__all__ = [
    "BUCKET_LEDGER",
    "LedgerReader",
    "combine",
    "ledger_key",
    "subagent_key",
    "with_subagents_usage",
]

#: KV bucket of the ledger.
BUCKET_LEDGER: Final = subjects.BUCKET_LEDGER


def ledger_key(project_id: str, conversation_id: str) -> str:
    """The key of one conversation's totals; ``ValueError`` for an id that is not a token."""
    return f"{subjects.validate_token(project_id, 'project id')}.{subjects.validate_token(conversation_id, 'conversation id')}"


def subagent_key(project_id: str, parent_id: str, child_id: str) -> str:
    """The key of one sub-agent's totals under its parent: ``<p>.<parent>.sub.<child>``.

    Written once the child has finished, with the child's totals including its own
    sub-agents (:meth:`LedgerReader.with_subagents`). Four tokens: a project's sum
    (``<p>.*``) never counts a child twice.
    """
    return f"{ledger_key(project_id, parent_id)}.sub.{subjects.validate_token(child_id, 'conversation id')}"


def combine(project_id: str, parts: Iterable[UsageTotals]) -> UsageTotals:
    """Sum of several conversations' totals: the project's totals (pure)."""
    out = UsageTotals(project_id=project_id)
    for t in parts:
        out = out.model_copy(
            update={
                "calls": out.calls + t.calls,
                "prompt_tokens": out.prompt_tokens + t.prompt_tokens,
                "completion_tokens": out.completion_tokens + t.completion_tokens,
                "cached_tokens": out.cached_tokens + t.cached_tokens,
                "total_tokens": out.total_tokens + t.total_tokens,
                "cost_usd": round(out.cost_usd + t.cost_usd, 10),
                "unpriced_calls": out.unpriced_calls + t.unpriced_calls,
            }
        )
    return out


#: The fields of a ``usage`` projection that add up over calls (the others are the last call's).
_SUMMED: Final = (
    "calls",
    "prompt_tokens",
    "completion_tokens",
    "cached_tokens",
    "total_tokens",
    "unpriced_calls",
)


def with_subagents_usage(usage: Mapping[str, Any], children: Iterable[UsageTotals]) -> dict[str, Any]:
    """A conversation's ``usage`` projection with its finished sub-agents' totals added (pure).

    Calls, tokens, unpriced calls and cost add up; the last call's fields (``model``,
    ``context_tokens``, ``context_window``) stay the conversation's own: they say how full
    *its* context is. A cost of ``None`` (unknown) stays unknown. The shape stays the
    projection's: nothing is added that a reader of ``usage`` does not know.
    """
    done = list(children)
    out = dict(usage)
    for key in _SUMMED:
        if key in out or any(getattr(child, key) for child in done):
            out[key] = int(out.get(key) or 0) + sum(int(getattr(child, key)) for child in done)
    cost = out.get("cost_usd", 0.0)
    if cost is not None:
        out["cost_usd"] = round(float(cost) + sum(child.cost_usd for child in done), 10)
    return out


class LedgerReader:
    """Totals read from the bucket :data:`BUCKET_LEDGER` (opened on first use)."""

    def __init__(self, bus: Bus) -> None:
        self._bus = bus
        self._kv: KeyValue | None = None

    async def _bucket(self) -> KeyValue:
        if self._kv is None:
            self._kv = await self._bus.kv(BUCKET_LEDGER, history=1)
        return self._kv

    async def conversation(self, project_id: str, conversation_id: str) -> UsageTotals:
        """One conversation's totals; zeros when it has made no call yet."""
        kv = await self._bucket()
        try:
            entry = await kv.get(ledger_key(project_id, conversation_id))
        except nats.js.errors.KeyNotFoundError:
            return UsageTotals(project_id=project_id, conversation_id=conversation_id)
        return UsageTotals.model_validate_json(entry.value or b"{}")

    async def project(self, project_id: str) -> UsageTotals:
        """The sum over every conversation of the project."""
        kv = await self._bucket()
        prefix = subjects.validate_token(project_id, "project id")
        values = await kv_values(kv, f"{prefix}.", one_token=True)
        return combine(project_id, [UsageTotals.model_validate(json.loads(v)) for v in values.values()])

    async def subagents(self, project_id: str, conversation_id: str) -> list[UsageTotals]:
        """The totals of each finished sub-agent of a conversation (each with its own sub-agents)."""
        kv = await self._bucket()
        values = await kv_values(kv, f"{ledger_key(project_id, conversation_id)}.sub.", one_token=True)
        return [UsageTotals.model_validate(json.loads(v)) for v in values.values()]

    async def with_subagents(self, project_id: str, conversation_id: str) -> UsageTotals:
        """A conversation's own totals plus those of its finished sub-agents (at any depth)."""
        own = await self.conversation(project_id, conversation_id)
        total = combine(project_id, [own, *await self.subagents(project_id, conversation_id)])
        return total.model_copy(update={"conversation_id": conversation_id})
