"""The conversation reducer: the canonical loop, cancel/resume, the turn limit, limits."""

from __future__ import annotations

from typing import Any

import pytest

from jidocode.services.conversation.core import (
    TRANSITIONS,
    CancelLlm,
    CancelPendingSubagents,
    CancelPendingTools,
    ContinueDrain,
    Emit,
    Limits,
    RunLlm,
    RunToolIntent,
    Status,
    Trigger,
    drain,
    ingest,
    initial_state,
    next_status,
    project,
    recover,
    replay,
    run_to_idle,
)
from jidocode.services.conversation.core.projections import NO_RESULT

from ._helpers import calls, llm_done, llm_fail, sig, tool_done, user


def _of(intents: tuple[object, ...], kind: type) -> list[Any]:
    return [i for i in intents if isinstance(i, kind)]


def test_user_message_requests_the_llm_with_the_context() -> None:
    state, intents = run_to_idle(initial_state("p", "c"), [user("hello", id="u1")])
    assert state.status is Status.AWAITING_LLM
    [run] = _of(intents, RunLlm)
    assert run.messages == ({"role": "user", "content": "hello"},)
    assert run.correlation_id == "u1" and run.turn == 1
    requested = state.timeline[-1]
    assert requested.type == "conversation.llm.requested"
    assert requested.causation_id == "u1" and requested.correlation_id == "u1"
    assert requested.id == "p:c:1" and requested.id == run.request_id
    assert [e.entry.id for e in _of(intents, Emit)] == ["u1", "p:c:1"]


def test_every_tool_call_of_one_turn_runs_and_the_loop_continues() -> None:
    state, _ = run_to_idle(initial_state("p", "c"), [user("do it", id="u1")])
    state, intents = run_to_idle(state, [llm_done(state, "", calls("read", "grep", "bash"))])
    runs = _of(intents, RunToolIntent)
    assert [r.name for r in runs] == ["read", "grep", "bash"]
    assert all(r.correlation_id == "u1" for r in runs)
    assert state.status is Status.AWAITING_TOOLS and len(state.pending_tool_calls) == 3
    # results arrive out of order; the next LLM call waits for all of them
    state, intents = run_to_idle(state, [tool_done(state, 2)])
    assert not _of(intents, RunLlm)
    state, intents = run_to_idle(state, [tool_done(state, 0, ok=False)])
    state, intents = run_to_idle(state, [tool_done(state, 0, data={"x": 1})])
    [run] = _of(intents, RunLlm)
    assert run.turn == 2
    roles = [m["role"] for m in run.messages]
    assert roles == ["user", "assistant", "tool", "tool", "tool"]
    assert [m["tool_call_id"] for m in run.messages[2:]] == ["call_0", "call_1", "call_2"]
    assert run.messages[2]["content"].startswith("error (tool_error)")
    assert run.messages[3]["content"] == '{"x": 1}'
    state, intents = run_to_idle(state, [llm_done(state, "all done")])
    assert state.status is Status.IDLE
    assert state.timeline[-2].type == "conversation.assistant.message"
    assert state.timeline[-2].data["text"] == "all done"
    ended = state.timeline[-1]
    assert ended.type == "conversation.turn.ended"
    assert ended.data["outcome"] == "completed" and ended.data["text"] == "all done"
    assert ended.data["answer_id"] == state.timeline[-2].id


def test_causation_links_every_entry_to_its_cause() -> None:
    state, _ = run_to_idle(initial_state("p", "c"), [user(id="u1")])
    done = llm_done(state, "", calls("read"))
    state, _ = run_to_idle(state, [done])
    tool_req = state.timeline[-1]
    assert tool_req.type == "conversation.tool.requested"
    assert tool_req.causation_id == done.id and tool_req.correlation_id == "u1"
    ids = {e.id for e in state.timeline}
    assert all(e.causation_id in ids for e in state.timeline if e.causation_id)


def test_message_while_running_is_answered_after_the_current_call() -> None:
    state, _ = run_to_idle(initial_state("p", "c"), [user("one", id="u1")])
    state, intents = run_to_idle(state, [user("two", id="u2")])
    assert not _of(intents, RunLlm)
    state, intents = run_to_idle(state, [llm_done(state, "answer one")])
    [run] = _of(intents, RunLlm)
    assert [m["content"] for m in run.messages] == ["one", "answer one", "two"]


def test_llm_failure_returns_to_idle_with_a_diagnostic() -> None:
    state, _ = run_to_idle(initial_state("p", "c"), [user()])
    state, intents = run_to_idle(state, [llm_fail(state)])
    assert state.status is Status.IDLE and not _of(intents, RunLlm)
    problems = project(state, "diagnostics")["problems"]
    assert [p["type"] for p in problems] == ["conversation.llm.failed"]


def test_cancel_stops_orchestration_until_resume() -> None:
    state, _ = run_to_idle(initial_state("p", "c"), [user(id="u1")])
    state, _ = run_to_idle(state, [llm_done(state, "", calls("a", "b"))])
    pending = tuple(c.request_id for c in state.pending_tool_calls)
    result_after_cancel = tool_done(state, 0)
    state, intents = run_to_idle(state, [sig("conversation.cancel", {"reason": "stop"})])
    assert state.status is Status.CANCELLED
    assert _of(intents, CancelPendingTools)[0].request_ids == pending
    assert _of(intents, CancelPendingSubagents)
    assert state.pending_tool_calls == ()
    # late results and new messages: journaled, no orchestration
    state, intents = run_to_idle(state, [result_after_cancel, user("more")])
    assert not _of(intents, RunLlm) and not _of(intents, RunToolIntent)
    assert state.status is Status.CANCELLED
    # resume continues the normal flow: the message received while cancelled is answered now
    state, intents = run_to_idle(state, [sig("conversation.resume")])
    [run] = _of(intents, RunLlm)
    assert state.status is Status.AWAITING_LLM
    assert run.messages[-1] == {"role": "user", "content": "more"}
    # the cancelled call without a result keeps the context a valid transcript
    tool_msgs = [m for m in run.messages if m["role"] == "tool"]
    assert [m["content"] for m in tool_msgs] == ["out", NO_RESULT]


def test_resume_without_a_new_message_asks_nothing() -> None:
    state, _ = run_to_idle(initial_state("p", "c"), [user(id="u1")])
    state, _ = run_to_idle(state, [sig("conversation.cancel")])
    state, intents = run_to_idle(state, [sig("conversation.resume")])
    assert state.status is Status.IDLE and not _of(intents, RunLlm)
    state, intents = run_to_idle(state, [user("again")])
    assert _of(intents, RunLlm)


def test_cancel_during_llm_call_cancels_it_and_ignores_the_late_answer() -> None:
    state, _ = run_to_idle(initial_state("p", "c"), [user()])
    late = llm_done(state, "late", calls("x"))
    state, intents = run_to_idle(state, [sig("conversation.cancel")])
    assert _of(intents, CancelLlm)[0].request_id == late.data["request_id"]
    state, intents = run_to_idle(state, [late])
    assert not _of(intents, RunToolIntent) and state.pending_tool_calls == ()
    state, _ = run_to_idle(state, [sig("conversation.resume")])
    assert state.status is Status.IDLE


def test_turn_limit_stops_the_loop_with_a_clear_entry() -> None:
    state, _ = run_to_idle(initial_state("p", "c", Limits(max_turns=2)), [user()])
    state, _ = run_to_idle(state, [llm_done(state, "", calls("a"))])
    state, _ = run_to_idle(state, [tool_done(state)])
    assert state.turns == 2 and state.status is Status.AWAITING_LLM
    state, _ = run_to_idle(state, [llm_done(state, "", calls("a"))])
    state, intents = run_to_idle(state, [tool_done(state)])
    assert not _of(intents, RunLlm)
    stop, ended = state.timeline[-2], state.timeline[-1]
    assert stop.type == "conversation.loop.stopped"
    assert stop.data == {"reason": "max_turns", "turns": 2, "max_turns": 2}
    assert ended.type == "conversation.turn.ended"
    assert (ended.data["outcome"], ended.data["error_type"]) == ("stopped", "max_turns")
    assert state.status is Status.IDLE
    # a new user message starts a fresh budget
    state, intents = run_to_idle(state, [user()])
    assert _of(intents, RunLlm)[0].turn == 1


def test_duplicate_is_ignored_but_same_id_in_other_correlation_is_not() -> None:
    state, _ = run_to_idle(initial_state("p", "c"), [user(id="x", correlation_id="k1")])
    again, intents = ingest(state, user(id="x", correlation_id="k1"))
    assert again is state and intents == ()
    other, _ = ingest(state, user(id="x", correlation_id="k2"))
    assert other.queue_size == 1


def test_overflow_drops_the_new_signal_and_keeps_the_queue() -> None:
    state = initial_state("p", "c", Limits(max_queue=2))
    state, _ = ingest(state, user(id="a"))
    state, _ = ingest(state, user(id="b"))
    state, intents = ingest(state, user(id="c"))
    assert [s.id for s in state.event_queue] == ["a", "b"]
    [emit] = _of(intents, Emit)
    assert emit.entry.type == "conversation.queue.overflow"
    assert emit.entry.data == {
        "dropped_id": "c",
        "dropped_type": "conversation.user.message",
        "queue_size": 2,
        "max_queue": 2,
    }
    # dropped is decided once: a copy of it (the input stream read again after a reload) stays
    # dropped; the sender sends it again under a new id once there is room
    state, _ = drain(state)
    assert state.queue_size == 0
    again, intents = ingest(state, user(id="c"))
    assert again is state and intents == ()
    state, _ = ingest(state, user(id="c2"))
    assert [s.id for s in state.event_queue] == ["c2"]


def test_a_result_of_the_conversations_own_request_is_never_dropped_at_a_full_queue() -> None:
    state, _ = run_to_idle(initial_state("p", "c", Limits(max_queue=2)), [user(id="u0")])
    result = llm_done(state, "the answer", [])  # its LLM call is outstanding
    for i in range(2):
        state, _ = ingest(state, user(id=f"u{i + 1}"))
    assert state.queue_size == 2
    state, intents = ingest(state, result)
    assert not _of(intents, Emit) and state.queue_size == 3  # taken, not an overflow
    while state.event_queue:
        state, _ = drain(state)
    answers = [e.data["text"] for e in state.timeline if e.type == "conversation.assistant.message"]
    assert answers == ["the answer"]  # the turn was answered
    assert state.pending_llm != result.data["request_id"]  # and the messages meanwhile asked anew
    assert not [e for e in state.timeline if e.type == "conversation.queue.overflow"]


def test_drain_is_bounded_and_yields_continue_drain() -> None:
    state = initial_state("p", "c", Limits(max_drain_steps=3, max_queue=10))
    for i in range(7):
        state, _ = ingest(
            state, sig("conversation.approval.response", {"request_id": str(i), "decision": "deny"})
        )
    state, intents = drain(state)
    assert state.queue_size == 4 and intents[-1] == ContinueDrain(queued=4)
    state, intents = drain(state)
    state, intents = drain(state)
    assert state.queue_size == 0 and not _of(intents, ContinueDrain)
    assert drain(state) == (state, ())


def test_recover_reissues_outstanding_calls_after_replay() -> None:
    state, _ = run_to_idle(initial_state("p", "c"), [user(id="u1")])
    state, _ = run_to_idle(state, [llm_done(state, "", calls("a", "b"))])
    state, _ = run_to_idle(state, [tool_done(state, 0)])
    rebuilt = replay("p", "c", state.timeline)
    assert rebuilt == state
    [run] = recover(rebuilt)
    assert isinstance(run, RunToolIntent) and run.name == "b"
    fresh, _ = run_to_idle(initial_state("p", "c"), [user(id="u1")])
    [again] = recover(replay("p", "c", fresh.timeline))
    assert isinstance(again, RunLlm) and again.request_id == fresh.pending_llm


def test_usage_sums_llm_completions() -> None:
    state, _ = run_to_idle(initial_state("p", "c"), [user()])
    state, _ = run_to_idle(state, [llm_done(state, "", calls("a"))])
    state, _ = run_to_idle(state, [tool_done(state)])
    state, _ = run_to_idle(state, [llm_done(state, "fin")])
    used = project(state, "usage")
    assert used["calls"] == 2 and used["prompt_tokens"] == 20 and used["cached_tokens"] == 4
    assert used["cost_usd"] == pytest.approx(0.002)


def test_subagents_are_tracked_and_cancelled() -> None:
    state, _ = run_to_idle(
        initial_state("p", "c"),
        [sig("conversation.subagent.started", {"subagent_id": "s1", "name": "scout"})],
    )
    assert project(state, "subagent_status")["s1"]["status"] == "running"
    state, intents = run_to_idle(state, [sig("conversation.cancel")])
    assert _of(intents, CancelPendingSubagents)[0].subagent_ids == ("s1",)
    assert project(state, "subagent_status")["s1"]["status"] == "cancelled"


def test_projections_by_name() -> None:
    state, _ = run_to_idle(initial_state("p", "c"), [user()])
    state, _ = run_to_idle(state, [llm_done(state, "", calls("a"))])
    assert project(state, "pending_tool_calls")[0]["name"] == "a"
    assert project(state, "timeline")[0]["type"] == "conversation.user.message"
    assert project(state, "diagnostics")["status"] == "awaiting_tools"
    with pytest.raises(KeyError):
        project(state, "nope")


@pytest.mark.parametrize(("status", "trigger"), list(TRANSITIONS))
def test_transition_table_is_what_next_status_uses(status: Status, trigger: Trigger) -> None:
    assert next_status(status, trigger) is TRANSITIONS[(status, trigger)]


def test_undefined_transitions_leave_status() -> None:
    assert next_status(Status.IDLE, Trigger.RESUME) is None
    assert next_status(Status.CANCELLED, Trigger.LLM_REQUESTED) is None
    assert all(next_status(s, Trigger.CANCEL) is Status.CANCELLED for s in Status)
