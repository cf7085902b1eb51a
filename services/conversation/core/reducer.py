"""The reducer: ``ingest`` enqueues, ``drain`` applies, ``replay`` rebuilds, ``recover`` resumes.

Pure and deterministic: no I/O, no clock, no random. Entries the core
generates get ids minted from a counter in the state
(``<project>:<conversation>:<n>``), their time is the time of their cause,
their correlation id that of their cause and their causation id the cause's
id — so the same input sequence always yields the same state, ids included.

Event sourcing inside: :func:`_evolve` is the only place the state changes
and depends on the entry alone; :func:`_react` decides what follows an
applied entry (new entries and intents). Live processing runs both, replay of
a journal runs only ``_evolve``, so ``replay(journal) == live state``.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from .intents import (
    CancelLlm,
    CancelPendingSubagents,
    CancelPendingTools,
    ContinueDrain,
    Emit,
    Intent,
    RunLlm,
    RunTool,
)
from .projections import llm_context
from .signal import Signal
from .state import (
    ConversationState,
    Limits,
    PendingToolCall,
    Status,
    SubagentInfo,
    Trigger,
    initial_state,
    next_status,
)

__all__ = ["CORE_SOURCE", "drain", "ingest", "recover", "replay", "run_to_idle"]

#: ``source`` of the entries the core generates.
CORE_SOURCE = "conversation/core"

Intents = tuple[Intent, ...]


@dataclass
class _Work:
    """Mutable scratch copy of a state, private to one reducer call."""

    base: ConversationState
    status: Status
    timeline: list[Signal]
    queue: deque[Signal]
    corr: dict[str, frozenset[str]]
    pending_llm: str | None
    pending_tools: dict[str, PendingToolCall]
    pending_subagents: list[str]
    subagents: dict[str, SubagentInfo]
    turns: int
    unanswered: bool
    next_seq: int
    intents: list[Intent] = field(default_factory=list)


def _thaw(state: ConversationState) -> _Work:
    return _Work(
        base=state,
        status=state.status,
        timeline=list(state.timeline),
        queue=deque(state.event_queue),
        corr=dict(state.correlation_index),
        pending_llm=state.pending_llm,
        pending_tools={call.request_id: call for call in state.pending_tool_calls},
        pending_subagents=list(state.pending_subagents),
        subagents=dict(state.subagents),
        turns=state.turns,
        unanswered=state.unanswered,
        next_seq=state.next_seq,
    )


def _freeze(w: _Work) -> ConversationState:
    return w.base.model_copy(
        update={
            "status": w.status,
            "timeline": tuple(w.timeline),
            "event_queue": tuple(w.queue),
            "queue_size": len(w.queue),
            "correlation_index": w.corr,
            "pending_llm": w.pending_llm,
            "pending_tool_calls": tuple(w.pending_tools.values()),
            "pending_subagents": tuple(w.pending_subagents),
            "subagents": w.subagents,
            "turns": w.turns,
            "unanswered": w.unanswered,
            "next_seq": w.next_seq,
        }
    )


def _mark_seen(corr: dict[str, frozenset[str]], signal: Signal) -> None:
    corr[signal.correlation_id] = corr.get(signal.correlation_id, frozenset()) | {signal.id}


def _transition(w: _Work, trigger: Trigger) -> None:
    status = next_status(w.status, trigger)
    if status is not None:
        w.status = status


def _mint(w: _Work, type_: str, data: dict[str, Any], cause: Signal) -> Signal:
    return Signal(
        id=f"{w.base.project_id}:{w.base.conversation_id}:{w.next_seq}",
        type=type_,
        source=CORE_SOURCE,
        data=data,
        correlation_id=cause.correlation_id,
        causation_id=cause.id,
        time=cause.time,
    )


# -- evolve: the only state change, a function of the entry alone ------------------


def _evolve(w: _Work, s: Signal) -> None:
    w.timeline.append(s)
    _mark_seen(w.corr, s)
    if s.source == CORE_SOURCE:
        w.next_seq += 1
    t, d = s.type, s.data
    if t == "conversation.user.message":
        w.unanswered = True
        w.turns = 0
    elif t == "conversation.llm.requested":
        _transition(w, Trigger.LLM_REQUESTED)
        w.pending_llm = s.id
        w.turns += 1
        w.unanswered = False
    elif t == "conversation.llm.completed":
        if d.get("request_id") == w.pending_llm and w.pending_llm is not None:
            w.pending_llm = None
            _transition(w, Trigger.LLM_ANSWERED_WITH_TOOLS if d.get("tool_calls") else Trigger.LLM_ANSWERED)
    elif t == "conversation.llm.failed":
        if d.get("request_id") == w.pending_llm and w.pending_llm is not None:
            w.pending_llm = None
            _transition(w, Trigger.LLM_FAILED)
    elif t == "conversation.tool.requested":
        w.pending_tools[s.id] = PendingToolCall(
            request_id=s.id,
            call_id=str(d["call_id"]),
            name=str(d["name"]),
            args=dict(d.get("args") or {}),
            llm_request_id=str(d["llm_request_id"]),
            correlation_id=s.correlation_id,
        )
    elif t in ("conversation.tool.completed", "conversation.tool.failed"):
        w.pending_tools.pop(str(d.get("request_id")), None)
    elif t == "conversation.loop.stopped":
        _transition(w, Trigger.LOOP_STOPPED)
    elif t == "conversation.cancel":
        _transition(w, Trigger.CANCEL)
        w.pending_llm = None
        w.pending_tools.clear()
        for sid in w.pending_subagents:
            w.subagents[sid] = w.subagents[sid].model_copy(update={"status": "cancelled"})
        w.pending_subagents.clear()
    elif t == "conversation.resume":
        _transition(w, Trigger.RESUME)
    elif t == "conversation.subagent.started":
        sid = str(d["subagent_id"])
        w.subagents[sid] = SubagentInfo(subagent_id=sid, name=str(d.get("name") or ""))
        if sid not in w.pending_subagents:
            w.pending_subagents.append(sid)
    elif t == "conversation.subagent.completed":
        sid = str(d["subagent_id"])
        info = w.subagents.get(sid) or SubagentInfo(subagent_id=sid)
        w.subagents[sid] = info.model_copy(
            update={"status": str(d.get("status") or "completed"), "result": d.get("result")}
        )
        if sid in w.pending_subagents:
            w.pending_subagents.remove(sid)


# -- react: what follows an applied entry ------------------------------------------


def _apply(w: _Work, s: Signal) -> None:
    before_llm = w.pending_llm
    before_tools = tuple(w.pending_tools)
    before_subagents = tuple(w.pending_subagents)
    _evolve(w, s)
    w.intents.append(Emit(entry=s))
    t, d = s.type, s.data
    if t == "conversation.cancel":
        if before_llm is not None:
            w.intents.append(CancelLlm(request_id=before_llm))
        w.intents.append(CancelPendingTools(request_ids=before_tools, correlation_id=s.correlation_id))
        w.intents.append(
            CancelPendingSubagents(subagent_ids=before_subagents, correlation_id=s.correlation_id)
        )
        return
    if w.status is Status.CANCELLED:
        return  # no orchestration until resume
    if t == "conversation.user.message":
        if w.status is Status.IDLE:
            _request_llm(w, s)
    elif t == "conversation.llm.requested":
        w.intents.append(
            RunLlm(
                request_id=s.id,
                correlation_id=s.correlation_id,
                messages=tuple(llm_context(w.timeline)),
                turn=int(d["turn"]),
            )
        )
    elif t == "conversation.tool.requested":
        call = w.pending_tools[s.id]
        w.intents.append(
            RunTool(
                request_id=s.id,
                call_id=call.call_id,
                name=call.name,
                args=call.args,
                correlation_id=s.correlation_id,
            )
        )
    elif t == "conversation.llm.completed" and before_llm is not None and d.get("request_id") == before_llm:
        calls = list(d.get("tool_calls") or [])
        text = str(d.get("content") or "")
        if text or not calls:
            _apply(w, _mint(w, "conversation.assistant.message", {"text": text, "request_id": before_llm}, s))
        for index, call in enumerate(calls):
            args = call.get("arguments")
            data = {
                "call_id": str(call.get("id") or f"call_{index}"),
                "name": str(call.get("name") or ""),
                "args": args if isinstance(args, dict) else {"value": args},
                "llm_request_id": before_llm,
            }
            _apply(w, _mint(w, "conversation.tool.requested", data, s))
        if not calls and w.unanswered:
            _request_llm(w, s)
    elif t in ("conversation.tool.completed", "conversation.tool.failed"):
        if d.get("request_id") in before_tools and not w.pending_tools and w.status is Status.AWAITING_TOOLS:
            _request_llm(w, s)


def _request_llm(w: _Work, cause: Signal) -> None:
    limit = w.base.limits.max_turns
    if w.turns >= limit:
        data = {"reason": "max_turns", "turns": w.turns, "max_turns": limit}
        _apply(w, _mint(w, "conversation.loop.stopped", data, cause))
        return
    _apply(w, _mint(w, "conversation.llm.requested", {"turn": w.turns + 1}, cause))


# -- public API -------------------------------------------------------------------


def ingest(state: ConversationState, signal: Signal) -> tuple[ConversationState, Intents]:
    """Enqueue ``signal`` unless it is a duplicate or the queue is full.

    A duplicate ``(id, correlation_id)`` is ignored. At a full queue the NEW
    signal is dropped and a ``conversation.queue.overflow`` entry is applied
    (and emitted); nothing already accepted is lost.
    """
    if state.is_seen(signal):
        return state, ()
    if state.queue_size >= state.limits.max_queue:
        w = _thaw(state)
        data = {
            "dropped_id": signal.id,
            "dropped_type": signal.type,
            "queue_size": state.queue_size,
            "max_queue": state.limits.max_queue,
        }
        _apply(w, _mint(w, "conversation.queue.overflow", data, signal))
        return _freeze(w), tuple(w.intents)
    corr = dict(state.correlation_index)
    _mark_seen(corr, signal)
    new = state.model_copy(
        update={
            "event_queue": (*state.event_queue, signal),
            "queue_size": state.queue_size + 1,
            "correlation_index": corr,
        }
    )
    return new, ()


def drain(state: ConversationState) -> tuple[ConversationState, Intents]:
    """Apply at most ``limits.max_drain_steps`` queued signals, in order.

    Returns the new state and the intents, in order: an ``emit`` for every new
    timeline entry, ``run_llm``/``run_tool``/cancel intents as decided, and a
    final ``continue_drain`` when signals are still queued.
    """
    if not state.event_queue:
        return state, ()
    w = _thaw(state)
    steps = 0
    while w.queue and steps < state.limits.max_drain_steps:
        _apply(w, w.queue.popleft())
        steps += 1
    if w.queue:
        w.intents.append(ContinueDrain(queued=len(w.queue)))
    return _freeze(w), tuple(w.intents)


def replay(
    project_id: str, conversation_id: str, journal: Iterable[Signal], limits: Limits | None = None
) -> ConversationState:
    """Rebuild a state from its journal (the applied entries, in order)."""
    w = _thaw(initial_state(project_id, conversation_id, limits))
    for entry in journal:
        if entry.id in w.corr.get(entry.correlation_id, frozenset()):
            continue  # a redelivered journal entry
        _evolve(w, entry)
    return _freeze(w)


def recover(state: ConversationState) -> Intents:
    """Intents to carry on after a rebuild: the LLM call and tool calls still outstanding."""
    intents: list[Intent] = []
    if state.status is Status.AWAITING_LLM and state.pending_llm is not None:
        for index in range(len(state.timeline) - 1, -1, -1):
            entry = state.timeline[index]
            if entry.id == state.pending_llm:
                intents.append(
                    RunLlm(
                        request_id=entry.id,
                        correlation_id=entry.correlation_id,
                        messages=tuple(llm_context(state.timeline[: index + 1])),
                        turn=int(entry.data["turn"]),
                    )
                )
                break
    if state.status is not Status.CANCELLED:
        for call in state.pending_tool_calls:
            intents.append(
                RunTool(
                    request_id=call.request_id,
                    call_id=call.call_id,
                    name=call.name,
                    args=call.args,
                    correlation_id=call.correlation_id,
                )
            )
    if state.event_queue:
        intents.append(ContinueDrain(queued=state.queue_size))
    return tuple(intents)


def run_to_idle(state: ConversationState, signals: Iterable[Signal]) -> tuple[ConversationState, Intents]:
    """Ingest each signal and drain until the queue is empty (tests, bench, tools)."""
    out: list[Intent] = []
    for signal in signals:
        state, intents = ingest(state, signal)
        out.extend(intents)
        while state.event_queue:
            state, intents = drain(state)
            out.extend(i for i in intents if not isinstance(i, ContinueDrain))
    return state, tuple(out)
