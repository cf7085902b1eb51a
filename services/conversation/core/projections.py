"""Projections: read models computed from the state alone, deterministically.

``llm_context`` (OpenAI-style messages) is built incrementally in ``context.py``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from jidocode.shared.events.conversation import (
    CompactionCompleted,
    CompactionFailed,
    ConversationError,
    LlmCompleted,
    LlmFailed,
    LoopStopped,
    QueueOverflow,
    ToolCallFailed,
    usage_cost,
    usage_count,
)

from .context import NO_RESULT, llm_context
from .state import ConversationState

__all__ = [
    "DIAGNOSTIC_TYPES",
    "NO_RESULT",
    "PROJECTIONS",
    "diagnostics",
    "llm_context",
    "pending_tool_calls",
    "project",
    "subagent_status",
    "timeline",
    "usage",
]

DIAGNOSTIC_TYPES = frozenset(
    model.TYPE
    for model in (ConversationError, LlmFailed, ToolCallFailed, QueueOverflow, LoopStopped, CompactionFailed)
)


def timeline(state: ConversationState) -> list[dict[str, Any]]:
    return [entry.to_dict() for entry in state.timeline]


def diagnostics(state: ConversationState) -> dict[str, Any]:
    return {
        "status": state.status.value,
        "queue_size": state.queue_size,
        "max_queue": state.limits.max_queue,
        "max_drain_steps": state.limits.max_drain_steps,
        "timeline_length": len(state.timeline),
        "pending_llm": state.pending_llm,
        "pending_tool_calls": len(state.pending_tool_calls),
        "pending_subagents": len(state.pending_subagents),
        "turns": state.turns,
        "max_turns": state.limits.max_turns,
        "compact_at": state.limits.compact_at,
        "compact_keep_turns": state.limits.compact_keep_turns,
        "compacted_to": state.compacted_to,
        "problems": [entry.to_dict() for entry in state.timeline if entry.type in DIAGNOSTIC_TYPES],
    }


def subagent_status(state: ConversationState) -> dict[str, Any]:
    return {sid: info.model_dump(mode="json") for sid, info in state.subagents.items()}


def pending_tool_calls(state: ConversationState) -> list[dict[str, Any]]:
    return [call.model_dump(mode="json") for call in state.pending_tool_calls]


_COUNTS = ("prompt_tokens", "completion_tokens", "cached_tokens", "total_tokens")


def _add_usage(totals: dict[str, Any], used: Mapping[str, Any]) -> None:
    """Add one call's ``usage`` to ``totals``; its price to ``cost_usd``, or count it in
    ``unpriced_calls`` when it has none."""
    totals["calls"] += 1
    for key in _COUNTS:
        totals[key] += usage_count(used, key)
    cost = usage_cost(used)
    if cost is None:
        totals["unpriced_calls"] += 1
    else:
        totals["cost_usd"] += cost


def usage(state: ConversationState) -> dict[str, Any]:
    """Sum of the usage of every :class:`LlmCompleted` entry, and the last call's context fill.

    ``cost_usd`` sums the calls that had a price; ``unpriced_calls`` counts those that had
    none (litellm does not know the model's price): with any, the total is unknown
    (``jidocode.shared.cost``).

    ``model`` and ``context_tokens`` (prompt + completion) are the last call's;
    ``context_window`` stays 0 here: the model's window is known to the LLM
    adapter, not the journal, and the conversation shell fills it in.
    """
    totals: dict[str, Any] = {
        "calls": 0,
        "prompt_tokens": 0,
        "completion_tokens": 0,
        "cached_tokens": 0,
        "total_tokens": 0,
        "cost_usd": 0.0,
        "unpriced_calls": 0,
        "model": None,
        "context_tokens": 0,
        "context_window": 0,
    }
    for entry in state.timeline:
        match entry.event:
            case CompactionCompleted() as summary:  # the summary call is paid for too
                _add_usage(totals, summary.usage)
                totals["context_tokens"] = summary.tokens_after
            case LlmCompleted() as answer:
                _add_usage(totals, answer.usage)
                totals["model"] = answer.model or None
                totals["context_tokens"] = answer.context_fill()
    totals["cost_usd"] = round(totals["cost_usd"], 10)
    return totals


PROJECTIONS = ("timeline", "llm_context", "diagnostics", "subagent_status", "pending_tool_calls", "usage")


def project(state: ConversationState, name: str) -> Any:
    """The projection ``name`` of ``state``; ``KeyError`` for an unknown name."""
    if name == "timeline":
        return timeline(state)
    if name == "llm_context":
        return llm_context(state.timeline)
    if name == "diagnostics":
        return diagnostics(state)
    if name == "subagent_status":
        return subagent_status(state)
    if name == "pending_tool_calls":
        return pending_tool_calls(state)
    if name == "usage":
        return usage(state)
    raise KeyError(name)
