"""Projections: read models computed from the state alone, deterministically.

``llm_context`` (OpenAI-style messages) is built incrementally in ``context.py``.
"""

from __future__ import annotations

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


def _add_cost(totals: dict[str, Any], used: dict[str, Any]) -> None:
    """Add a call's price to ``cost_usd``, or count it in ``unpriced_calls`` when it has none."""
    cost = used.get("cost_usd")
    if isinstance(cost, int | float) and not isinstance(cost, bool):
        totals["cost_usd"] += float(cost)
    else:
        totals["unpriced_calls"] += 1


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
        if entry.type == CompactionCompleted.TYPE:  # the summary call is paid for too
            used = entry.data.get("usage") or {}
            totals["calls"] += 1
            for key in ("prompt_tokens", "completion_tokens", "cached_tokens", "total_tokens"):
                totals[key] += int(used.get(key) or 0)
            _add_cost(totals, used)
            totals["context_tokens"] = int(entry.data.get("tokens_after") or 0)
            continue
        if entry.type != LlmCompleted.TYPE:
            continue
        used = entry.data.get("usage") or {}
        totals["calls"] += 1
        for key in ("prompt_tokens", "completion_tokens", "cached_tokens", "total_tokens"):
            totals[key] += int(used.get(key) or 0)
        _add_cost(totals, used)
        totals["model"] = str(entry.data.get("model") or "") or None
        totals["context_tokens"] = int(used.get("prompt_tokens") or 0) + int(
            used.get("completion_tokens") or 0
        )
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
