"""Projections: read models computed from the state alone, deterministically.

``llm_context`` builds OpenAI-style messages: a user message per
``conversation.user.message``; per LLM answer, at the place of its request,
one assistant message (its text and the tool calls the reducer requested)
followed by one ``tool`` message per call, in call order, wherever in the
timeline the results arrived. A call
without a result (cancelled, lost) gets a placeholder so the context stays a
valid chat transcript.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from .signal import Signal
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

NO_RESULT = "[no result: the tool call was cancelled or lost]"

DIAGNOSTIC_TYPES = frozenset(
    {
        "conversation.error",
        "conversation.llm.failed",
        "conversation.tool.failed",
        "conversation.queue.overflow",
        "conversation.loop.stopped",
    }
)


def timeline(state: ConversationState) -> list[dict[str, Any]]:
    return [entry.to_dict() for entry in state.timeline]


def _tool_content(result: Signal | None) -> str:
    if result is None:
        return NO_RESULT
    if result.type == "conversation.tool.failed":
        return f"error ({result.data.get('error_type')}): {result.data.get('message')}"
    data = result.data.get("data")
    if isinstance(data, str):
        return data
    return json.dumps(data, sort_keys=True, ensure_ascii=False, default=str)


def llm_context(entries: Sequence[Signal]) -> list[dict[str, Any]]:
    """OpenAI-style messages of ``entries`` (a timeline or a prefix of one)."""
    results: dict[str, Signal] = {}
    calls: dict[str, list[Signal]] = {}
    texts: dict[str, str] = {}
    for entry in entries:
        if entry.type in ("conversation.tool.completed", "conversation.tool.failed"):
            results.setdefault(str(entry.data["request_id"]), entry)
        elif entry.type == "conversation.tool.requested":
            calls.setdefault(str(entry.data["llm_request_id"]), []).append(entry)
        elif entry.type == "conversation.assistant.message":
            texts.setdefault(str(entry.data["request_id"]), str(entry.data["text"]))
    messages: list[dict[str, Any]] = []
    opened: set[str] = set()
    for entry in entries:
        if entry.type == "conversation.user.message":
            messages.append({"role": "user", "content": entry.data["text"]})
            continue
        # An answer sits where its request was made, before any input that came meanwhile.
        if entry.type == "conversation.llm.requested":
            llm_id = entry.id
        elif entry.type == "conversation.assistant.message":
            llm_id = str(entry.data["request_id"])
        elif entry.type == "conversation.tool.requested":
            llm_id = str(entry.data["llm_request_id"])
        else:
            continue
        if llm_id in opened or (llm_id not in texts and llm_id not in calls):
            continue
        opened.add(llm_id)
        group = calls.get(llm_id, [])
        message: dict[str, Any] = {"role": "assistant", "content": texts.get(llm_id)}
        if group:
            message["tool_calls"] = [
                {
                    "id": call.data["call_id"],
                    "type": "function",
                    "function": {
                        "name": call.data["name"],
                        "arguments": json.dumps(call.data.get("args", {}), sort_keys=True),
                    },
                }
                for call in group
            ]
        messages.append(message)
        for call in group:
            messages.append(
                {
                    "role": "tool",
                    "tool_call_id": call.data["call_id"],
                    "name": call.data["name"],
                    "content": _tool_content(results.get(call.id)),
                }
            )
    return messages


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
        "problems": [entry.to_dict() for entry in state.timeline if entry.type in DIAGNOSTIC_TYPES],
    }


def subagent_status(state: ConversationState) -> dict[str, Any]:
    return {sid: info.model_dump(mode="json") for sid, info in state.subagents.items()}


def pending_tool_calls(state: ConversationState) -> list[dict[str, Any]]:
    return [call.model_dump(mode="json") for call in state.pending_tool_calls]


def usage(state: ConversationState) -> dict[str, Any]:
    """Sum of the usage of every ``conversation.llm.completed`` entry."""
    totals: dict[str, Any] = {
        "calls": 0,
        "prompt_tokens": 0,
        "completion_tokens": 0,
        "cached_tokens": 0,
        "total_tokens": 0,
        "cost_usd": 0.0,
    }
    for entry in state.timeline:
        if entry.type != "conversation.llm.completed":
            continue
        used = entry.data.get("usage") or {}
        totals["calls"] += 1
        for key in ("prompt_tokens", "completion_tokens", "cached_tokens", "total_tokens"):
            totals[key] += int(used.get(key) or 0)
        totals["cost_usd"] += float(used.get("cost_usd") or 0.0)
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
