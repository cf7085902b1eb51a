"""Builders of signals for the conversation core tests."""

from __future__ import annotations

from typing import Any

from jidocode.services.conversation.core import ConversationState, Signal

_counter = iter(range(1, 10**9))


def sig(
    type_: str,
    data: dict[str, Any] | None = None,
    *,
    id: str | None = None,
    correlation_id: str | None = None,
    causation_id: str | None = None,
    time: str = "2026-01-01T00:00:00Z",
) -> Signal:
    sid = id or f"s{next(_counter)}"
    return Signal(
        id=sid,
        type=type_,
        source="test",
        data=data or {},
        correlation_id=correlation_id or sid,
        causation_id=causation_id,
        time=time,
    )


def user(text: str = "hi", *, id: str | None = None, correlation_id: str | None = None) -> Signal:
    return sig("conversation.user.message", {"text": text}, id=id, correlation_id=correlation_id)


def llm_done(
    state: ConversationState, content: str = "ok", tool_calls: list[dict[str, Any]] | None = None
) -> Signal:
    assert state.pending_llm is not None
    req = state.pending_llm
    corr = next(e.correlation_id for e in state.timeline if e.id == req)
    return sig(
        "conversation.llm.completed",
        {
            "request_id": req,
            "content": content,
            "tool_calls": tool_calls or [],
            "usage": {"prompt_tokens": 10, "completion_tokens": 5, "cached_tokens": 2, "cost_usd": 0.001},
        },
        id=f"{req}:result",
        correlation_id=corr,
        causation_id=req,
    )


def llm_fail(state: ConversationState) -> Signal:
    assert state.pending_llm is not None
    req = state.pending_llm
    return sig(
        "conversation.llm.failed",
        {"request_id": req, "error_type": "llm_error", "message": "boom"},
        id=f"{req}:result",
        correlation_id=next(e.correlation_id for e in state.timeline if e.id == req),
        causation_id=req,
    )


def tool_done(state: ConversationState, index: int = 0, *, ok: bool = True, data: Any = "out") -> Signal:
    call = state.pending_tool_calls[index]
    base = {"request_id": call.request_id, "call_id": call.call_id, "name": call.name}
    if ok:
        return sig(
            "conversation.tool.completed",
            {**base, "data": data},
            id=f"{call.request_id}:result",
            correlation_id=call.correlation_id,
            causation_id=call.request_id,
        )
    return sig(
        "conversation.tool.failed",
        {**base, "error_type": "tool_error", "message": "nope"},
        id=f"{call.request_id}:result",
        correlation_id=call.correlation_id,
        causation_id=call.request_id,
    )


def calls(*names: str) -> list[dict[str, Any]]:
    return [{"id": f"call_{i}", "name": n, "arguments": {"i": i}} for i, n in enumerate(names)]
