"""Property tests of the reducer's guarantees (hypothesis).

A driver turns a drawn list of actions into signals that fit the state at
each step (a user message, an LLM answer for the pending call with some tool
calls, a tool result, cancel, resume, a stale answer, a duplicate), so the
whole state machine is exercised.
"""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from jidocode.services.conversation.core import (
    PROJECTIONS,
    ContinueDrain,
    ConversationState,
    Emit,
    Limits,
    RunLlm,
    RunToolIntent,
    Signal,
    Status,
    drain,
    ingest,
    initial_state,
    project,
    replay,
    run_to_idle,
)

Action = tuple[Any, ...]

actions = st.lists(
    st.one_of(
        st.tuples(st.just("user"), st.text(max_size=5)),
        st.tuples(st.just("cancel")),
        st.tuples(st.just("resume")),
        st.tuples(st.just("llm_ok"), st.integers(0, 3), st.booleans()),
        st.tuples(st.just("llm_fail")),
        st.tuples(st.just("tool"), st.integers(0, 3), st.booleans()),
        st.tuples(st.just("stale")),
        st.tuples(st.just("dup"), st.integers(0, 1000)),
        st.tuples(st.just("approval")),
    ),
    max_size=40,
)
limits = st.builds(
    Limits,
    max_queue=st.integers(1, 8),
    max_drain_steps=st.integers(1, 5),
    max_turns=st.integers(1, 4),
)


def _corr_of(state: ConversationState, entry_id: str) -> str:
    return str(next(e.correlation_id for e in state.timeline if e.id == entry_id))


def _signal(state: ConversationState, action: Action, i: int, sent: list[Signal]) -> Signal | None:
    t = f"2026-01-01T00:00:{i % 60:02d}Z"
    kind = action[0]
    if kind == "user":
        return Signal(
            id=f"a{i}",
            type="conversation.user.message",
            source="t",
            data={"text": action[1]},
            correlation_id=f"a{i}",
            time=t,
        )
    if kind == "cancel":
        return Signal(
            id=f"a{i}",
            type="conversation.cancel",
            source="t",
            data={"reason": None},
            correlation_id=f"a{i}",
            time=t,
        )
    if kind == "resume":
        return Signal(
            id=f"a{i}", type="conversation.resume", source="t", data={}, correlation_id=f"a{i}", time=t
        )
    if kind == "approval":
        return Signal(
            id=f"a{i}",
            type="conversation.approval.response",
            source="t",
            data={"request_id": "r", "decision": "deny"},
            correlation_id=f"a{i}",
            time=t,
        )
    if kind == "stale":
        return Signal(
            id=f"a{i}",
            type="conversation.llm.completed",
            source="t",
            data={"request_id": "gone", "content": "x", "tool_calls": []},
            correlation_id="gone",
            time=t,
        )
    if kind == "dup":
        return sent[action[1] % len(sent)] if sent else None
    if kind in ("llm_ok", "llm_fail"):
        req = state.pending_llm
        if req is None:
            return None
        if kind == "llm_fail":
            data: dict[str, Any] = {"request_id": req, "error_type": "llm_error", "message": "x"}
            type_ = "conversation.llm.failed"
        else:
            tool_calls = [{"id": f"c{k}", "name": f"t{k}", "arguments": {"k": k}} for k in range(action[1])]
            data = {
                "request_id": req,
                "content": "answer" if action[2] else "",
                "tool_calls": tool_calls,
                "usage": {"prompt_tokens": 3, "completion_tokens": 1},
            }
            type_ = "conversation.llm.completed"
        return Signal(
            id=f"{req}:result",
            type=type_,
            source="t",
            data=data,
            correlation_id=_corr_of(state, req),
            causation_id=req,
            time=t,
        )
    if kind == "tool":
        if not state.pending_tool_calls:
            return None
        call = state.pending_tool_calls[action[1] % len(state.pending_tool_calls)]
        base = {"request_id": call.request_id, "call_id": call.call_id, "name": call.name}
        if action[2]:
            return Signal(
                id=f"{call.request_id}:result",
                type="conversation.tool.completed",
                source="t",
                data={**base, "data": "ok"},
                correlation_id=call.correlation_id,
                causation_id=call.request_id,
                time=t,
            )
        return Signal(
            id=f"{call.request_id}:result",
            type="conversation.tool.failed",
            source="t",
            data={**base, "error_type": "e", "message": "m"},
            correlation_id=call.correlation_id,
            causation_id=call.request_id,
            time=t,
        )
    raise AssertionError(kind)


def drive(acts: list[Action], lim: Limits) -> tuple[ConversationState, list[Signal], list[Any]]:
    state = initial_state("p", "c", lim)
    sent: list[Signal] = []
    out: list[Any] = []
    for i, action in enumerate(acts):
        signal = _signal(state, action, i, sent)
        if signal is None:
            continue
        sent.append(signal)
        state, intents = run_to_idle(state, [signal])
        out.extend(intents)
    return state, sent, out


def _views(state: ConversationState) -> dict[str, Any]:
    return {name: project(state, name) for name in PROJECTIONS}


@settings(max_examples=150, deadline=None)
@given(actions, limits)
def test_same_input_sequence_gives_same_state_and_projections(acts: list[Action], lim: Limits) -> None:
    a, sent_a, out_a = drive(acts, lim)
    b, sent_b, out_b = drive(acts, lim)
    assert a == b and sent_a == sent_b and out_a == out_b
    assert _views(a) == _views(b)
    # and a replay of the signals alone reproduces it
    c, _ = run_to_idle(initial_state("p", "c", lim), sent_a)
    assert c == a and _views(c) == _views(a)


@settings(max_examples=150, deadline=None)
@given(actions, limits)
def test_replay_of_the_journal_equals_the_live_state(acts: list[Action], lim: Limits) -> None:
    live, _, intents = drive(acts, lim)
    journal = [i.entry for i in intents if isinstance(i, Emit)]
    assert tuple(journal) == live.timeline
    rebuilt = replay("p", "c", journal, lim)
    assert rebuilt == live
    assert _views(rebuilt) == _views(live)
    # a journal redelivered twice (at-least-once) rebuilds the same state
    assert replay("p", "c", journal + journal, lim) == live


@settings(max_examples=150, deadline=None)
@given(actions, limits)
def test_duplicates_change_nothing(acts: list[Action], lim: Limits) -> None:
    live, sent, _ = drive(acts, lim)
    doubled: list[Signal] = []
    for s in sent:
        doubled += [s, s]
    again, _ = run_to_idle(initial_state("p", "c", lim), doubled)
    assert again == live
    ids = [e.id for e in live.timeline]
    assert len(ids) == len(set(ids))


@settings(max_examples=150, deadline=None)
@given(actions, limits)
def test_every_tool_call_runs_once_and_status_is_consistent(acts: list[Action], lim: Limits) -> None:
    state, _, intents = drive(acts, lim)
    requested = [e.id for e in state.timeline if e.type == "conversation.tool.requested"]
    ran = [i.request_id for i in intents if isinstance(i, RunToolIntent)]
    cancelled_meanwhile = {e.id for e in state.timeline if e.type == "conversation.tool.requested"} - set(ran)
    assert len(ran) == len(set(ran)) and set(ran) <= set(requested)
    assert not cancelled_meanwhile  # a tool call is requested only when orchestration runs
    llm_requests = [e.id for e in state.timeline if e.type == "conversation.llm.requested"]
    assert [i.request_id for i in intents if isinstance(i, RunLlm)] == llm_requests
    assert (state.status is Status.AWAITING_LLM) == (state.pending_llm is not None)
    if state.status is Status.AWAITING_TOOLS:
        assert state.pending_tool_calls or state.turns >= 1
    for entry in state.timeline:
        if entry.type == "conversation.llm.requested":
            assert entry.data["turn"] <= lim.max_turns


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 30), st.booleans()), max_size=60), limits)
def test_overflow_loses_nothing_accepted_and_drain_is_bounded(
    feed: list[tuple[int, bool]], lim: Limits
) -> None:
    state = initial_state("p", "c", lim)
    accepted: list[str] = []
    dropped: list[str] = []
    for n, do_drain in feed:
        s = Signal(
            id=f"x{n}",
            type="conversation.approval.response",
            source="t",
            data={"request_id": "r", "decision": "deny"},
            correlation_id=f"x{n}",
        )
        before = state
        state, intents = ingest(state, s)
        assert state.queue_size <= lim.max_queue and state.queue_size == len(state.event_queue)
        if state is before:
            assert s.id in accepted or s.id in dropped  # a copy of an accepted or dropped signal
        elif intents:
            [emit] = intents
            assert isinstance(emit, Emit) and emit.entry.type == "conversation.queue.overflow"
            assert emit.entry.data["dropped_id"] == s.id and before.event_queue == state.event_queue
            dropped.append(s.id)
        else:
            accepted.append(s.id)
        if do_drain:
            queued = state.queue_size
            applied_before = len(state.timeline)
            state, intents = drain(state)
            applied = len(state.timeline) - applied_before
            assert applied == min(queued, lim.max_drain_steps)
            assert (state.queue_size > 0) == any(isinstance(i, ContinueDrain) for i in intents)
    while state.event_queue:
        state, _ = drain(state)
    applied_ids = [e.id for e in state.timeline if e.type == "conversation.approval.response"]
    assert applied_ids == accepted
    overflow_named = [e.data["dropped_id"] for e in state.timeline if e.type == "conversation.queue.overflow"]
    assert overflow_named == dropped


@settings(max_examples=100, deadline=None)
@given(actions, limits)
def test_a_batch_ingested_then_drained_equals_one_at_a_time(acts: list[Action], lim: Limits) -> None:
    """The shell takes what is waiting at once: that must not change anything."""
    live, sent, _ = drive(acts, lim)
    roomy = lim.model_copy(update={"max_queue": max(1, len(sent))})
    state = initial_state("p", "c", roomy)
    for signal in sent:
        state, _ = ingest(state, signal)
    while state.event_queue:
        state, _ = drain(state)
    one_by_one, _ = run_to_idle(initial_state("p", "c", roomy), sent)
    assert state == one_by_one
    assert state.timeline == live.timeline
