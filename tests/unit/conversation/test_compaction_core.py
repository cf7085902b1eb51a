"""Compaction in the pure core: when the reducer asks for a summary, what the summary replaces in
``llm_context``, the one retry after an overflow, ``conversation.compact``; replay == live.

The shell's part (the summary call) is stood in for by a ``compaction.completed`` signal built
the way ``services/conversation/compaction.py`` builds it.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jidocode.services.conversation.compaction import (
    compaction_limits,
    estimate_tokens,
    summary_prompt,
    token_counts,
    transcript,
)
from jidocode.services.conversation.core import (
    CancelLlm,
    ConversationState,
    Emit,
    Limits,
    RunCompaction,
    RunLlm,
    Signal,
    Status,
    initial_state,
    project,
    recover,
    replay,
    run_to_idle,
)
from jidocode.services.conversation.core.context import SUMMARY_PREFIX, summary_message
from jidocode.shared.errors import JidoError
from jidocode.shared.events.conversation import CompactionCompleted, CompactionFailed

from ._helpers import sig, user

WINDOW = 1000


def _corr(state: ConversationState, entry_id: str) -> str:
    return next(e.correlation_id for e in state.timeline if e.id == entry_id)


def answer(state: ConversationState, text: str = "ok", *, tokens: int = 100, calls: int = 0) -> Signal:
    """The pending model call's answer, filling ``tokens`` of a ``WINDOW``-token window."""
    req = state.pending_llm
    assert req is not None
    return sig(
        "conversation.llm.completed",
        {
            "request_id": req,
            "content": text,
            "tool_calls": [{"id": f"c{req}{i}", "name": "read", "arguments": {"i": i}} for i in range(calls)],
            "usage": {"prompt_tokens": tokens - 10, "completion_tokens": 10},
            "context_window": WINDOW,
        },
        id=f"{req}:result",
        correlation_id=_corr(state, req),
        causation_id=req,
    )


def overflow(state: ConversationState) -> Signal:
    req = state.pending_llm
    assert req is not None
    return sig(
        "conversation.llm.failed",
        {"request_id": req, "error_type": "llm_context_overflow", "message": "too long"},
        id=f"{req}:result",
        correlation_id=_corr(state, req),
        causation_id=req,
    )


def tool_result(state: ConversationState, index: int = 0) -> Signal:
    call = state.pending_tool_calls[index]
    return sig(
        "conversation.tool.completed",
        {"request_id": call.request_id, "call_id": call.call_id, "name": call.name, "data": "out"},
        id=f"{call.request_id}:result",
        correlation_id=call.correlation_id,
        causation_id=call.request_id,
    )


def summarised(
    state: ConversationState, intent: RunCompaction, summary: str = "S", *, ok: bool = True
) -> Signal:
    """What the shell answers to ``intent`` (``compaction.completed``, or ``.failed``)."""
    event: CompactionCompleted | CompactionFailed
    if ok:
        before, after = token_counts(intent.context_tokens, intent.messages, intent.kept, summary)
        event = CompactionCompleted(
            request_id=intent.request_id,
            reason=intent.reason,
            summary=summary,
            from_index=intent.from_index,
            to_index=intent.to_index,
            first_id=intent.first_id,
            last_id=intent.last_id,
            messages=len(intent.messages),
            tokens_before=before,
            tokens_after=after,
        )
    else:
        event = CompactionFailed(
            request_id=intent.request_id, reason=intent.reason, error_type="llm_error", message="no"
        )
    return Signal.of(
        event,
        id=f"{intent.request_id}:result",
        source="test",
        correlation_id=intent.correlation_id,
        causation_id=intent.request_id,
        time="2026-01-01T00:00:00Z",
    )


def _one(intents: tuple[Any, ...], kind: type) -> Any:
    found = [i for i in intents if isinstance(i, kind)]
    assert len(found) == 1, intents
    return found[0]


def _types(intents: tuple[Any, ...]) -> list[str]:
    return [i.entry.type for i in intents if isinstance(i, Emit)]


def _start(limits: Limits) -> ConversationState:
    return initial_state("p", "c", limits)


def test_a_full_window_is_compacted_before_the_next_model_call_and_the_context_is_summary_plus_recent() -> (
    None
):
    state = _start(Limits(compact_at=0.5, compact_keep_turns=1))
    state, _ = run_to_idle(state, [user("first")])
    state, _ = run_to_idle(state, [answer(state, "one", tokens=300)])  # 30 %: nothing happens
    state, intents = run_to_idle(state, [user("second")])
    assert _types(intents)[-1] == "conversation.llm.requested"
    state, _ = run_to_idle(state, [answer(state, "two", tokens=600)])  # 60 % of the window
    before = project(state, "llm_context")
    state, intents = run_to_idle(state, [user("third")])
    assert _types(intents) == ["conversation.user.message", "conversation.compaction.requested"]
    assert not [i for i in intents if isinstance(i, RunLlm)]
    compaction = _one(intents, RunCompaction)
    assert compaction.reason == "threshold" and compaction.context_tokens == 600
    # the older turns are summarised; the newest turn (keep 1) stays word for word
    assert list(compaction.messages) == before
    assert list(compaction.kept) == [{"role": "user", "content": "third"}]
    assert (compaction.from_index, compaction.first_id) == (0, state.timeline[0].id)
    assert state.status is Status.AWAITING_LLM and state.pending_llm == compaction.request_id

    state, intents = run_to_idle(state, [summarised(state, compaction, "they said one and two")])
    call = _one(intents, RunLlm)
    assert list(call.messages) == [
        summary_message("they said one and two"),
        {"role": "user", "content": "third"},
    ]
    done = next(e for e in state.timeline if e.type == "conversation.compaction.completed")
    assert done.data["tokens_before"] == 600 and 0 < done.data["tokens_after"] < 600
    assert state.context_tokens == done.data["tokens_after"]
    # nothing left the timeline; the projection changed; replay gives the same context
    assert [e.data.get("text") for e in state.timeline if e.type == "conversation.user.message"] == [
        "first",
        "second",
        "third",
    ]
    rebuilt = replay("p", "c", state.timeline, state.limits)
    assert project(rebuilt, "llm_context") == project(state, "llm_context")
    assert rebuilt.model_dump() == state.model_dump()


def test_a_second_compaction_summarises_the_first_summary_and_what_came_after() -> None:
    state = _start(Limits(compact_at=0.5, compact_keep_turns=1))
    for n in range(3):
        state, intents = run_to_idle(state, [user(f"u{n}")])
        compaction = next((i for i in intents if isinstance(i, RunCompaction)), None)
        if compaction is not None:
            state, _ = run_to_idle(state, [summarised(state, compaction, f"summary {n}")])
        state, _ = run_to_idle(state, [answer(state, f"a{n}", tokens=900)])
    state, intents = run_to_idle(state, [user("u3")])
    compaction = _one(intents, RunCompaction)
    assert compaction.messages[0] == summary_message("summary 2")
    assert compaction.from_index > 0  # only what came after the previous cut is new
    state, intents = run_to_idle(state, [summarised(state, compaction, "summary 3")])
    assert list(_one(intents, RunLlm).messages) == [
        summary_message("summary 3"),
        {"role": "user", "content": "u3"},
    ]


def test_a_long_single_turn_keeps_its_last_answer_and_tool_results() -> None:
    state = _start(Limits(compact_at=0.5, compact_keep_turns=1))
    state, _ = run_to_idle(state, [user("do it")])
    for _ in range(2):
        state, _ = run_to_idle(state, [answer(state, "", tokens=900, calls=1)])
        state, intents = run_to_idle(state, [tool_result(state)])
    compaction = _one(intents, RunCompaction)  # asked before the turn's third model call
    assert compaction.kept[0]["role"] == "assistant" and compaction.kept[0]["tool_calls"]
    assert [m["role"] for m in compaction.kept] == ["assistant", "tool"]
    state, intents = run_to_idle(state, [summarised(state, compaction)])
    messages = list(_one(intents, RunLlm).messages)
    assert messages[0]["content"].startswith(SUMMARY_PREFIX)
    assert messages[1:] == list(compaction.kept)


def test_an_overflow_compacts_once_and_retries_once() -> None:
    state = _start(Limits(compact_at=0.0, compact_keep_turns=1))  # no threshold: only the overflow
    state, _ = run_to_idle(state, [user("a")])
    state, _ = run_to_idle(state, [answer(state, "A", tokens=10)])
    state, _ = run_to_idle(state, [user("b")])
    state, intents = run_to_idle(state, [overflow(state)])
    compaction = _one(intents, RunCompaction)
    assert compaction.reason == "overflow"
    state, intents = run_to_idle(state, [summarised(state, compaction)])
    retry = _one(intents, RunLlm)
    assert list(retry.messages) == [summary_message("S"), {"role": "user", "content": "b"}]
    # the retry overflows too: no second compaction, the failure stands
    state, intents = run_to_idle(state, [overflow(state)])
    assert not [i for i in intents if isinstance(i, (RunCompaction, RunLlm))]
    assert state.status is Status.IDLE
    # a new user message starts over: its overflow gets its compaction again
    state, _ = run_to_idle(state, [user("c")])
    state, intents = run_to_idle(state, [overflow(state)])
    assert _one(intents, RunCompaction).reason == "overflow"


def test_a_failed_overflow_compaction_ends_the_turn_and_a_failed_threshold_one_calls_the_model_anyway() -> (
    None
):
    state = _start(Limits(compact_at=0.5, compact_keep_turns=1))
    state, _ = run_to_idle(state, [user("a")])
    state, _ = run_to_idle(state, [answer(state, "A", tokens=10)])
    state, _ = run_to_idle(state, [user("b")])
    state, intents = run_to_idle(state, [overflow(state)])
    state, intents = run_to_idle(state, [summarised(state, _one(intents, RunCompaction), ok=False)])
    assert not [i for i in intents if isinstance(i, RunLlm)] and state.status is Status.IDLE
    assert project(state, "diagnostics")["problems"][-1]["type"] == "conversation.compaction.failed"

    state, _ = run_to_idle(state, [user("c")])
    state, _ = run_to_idle(state, [answer(state, "C", tokens=900)])
    state, intents = run_to_idle(state, [user("d")])
    state, intents = run_to_idle(state, [summarised(state, _one(intents, RunCompaction), ok=False)])
    assert _one(intents, RunLlm).messages[-1] == {"role": "user", "content": "d"}  # uncompacted


def test_compact_on_demand_when_idle_during_a_turn_and_with_nothing_to_compact() -> None:
    state = _start(Limits(compact_at=0.0, compact_keep_turns=1))
    state, intents = run_to_idle(state, [sig("conversation.compact", {})])
    assert _types(intents)[-1] == "conversation.error"
    assert state.timeline[-1].data["error_type"] == "nothing_to_compact"

    state, _ = run_to_idle(state, [user("a")])
    state, _ = run_to_idle(state, [answer(state, "A")])
    state, _ = run_to_idle(state, [user("b")])
    state, _ = run_to_idle(state, [answer(state, "B")])
    state, intents = run_to_idle(state, [sig("conversation.compact", {"instructions": "keep names"})])
    compaction = _one(intents, RunCompaction)
    assert compaction.reason == "manual" and compaction.instructions == "keep names"
    state, intents = run_to_idle(state, [summarised(state, compaction)])
    assert not [i for i in intents if isinstance(i, RunLlm)] and state.status is Status.IDLE
    assert project(state, "llm_context")[0] == summary_message("S")

    # during a turn: compacted before the turn's next model call
    state, _ = run_to_idle(state, [user("c")])
    state, _ = run_to_idle(state, [answer(state, "", calls=1)])
    state, intents = run_to_idle(state, [sig("conversation.compact", {})])
    assert not [i for i in intents if isinstance(i, RunCompaction)] and state.compact_wanted
    state, intents = run_to_idle(state, [tool_result(state)])
    assert _one(intents, RunCompaction).reason == "manual" and not state.compact_wanted


def test_cancel_during_a_compaction_cancels_the_summary_call_and_recover_reissues_it() -> None:
    state = _start(Limits(compact_at=0.5, compact_keep_turns=1))
    state, _ = run_to_idle(state, [user("a")])
    state, _ = run_to_idle(state, [answer(state, "A", tokens=900)])
    state, intents = run_to_idle(state, [user("b")])
    compaction = _one(intents, RunCompaction)
    # a rebuild while the summary call is outstanding asks for it again, the same
    assert _one(recover(replay("p", "c", state.timeline, state.limits)), RunCompaction) == compaction
    state, intents = run_to_idle(state, [sig("conversation.cancel", {})])
    assert _one(intents, CancelLlm).request_id == compaction.request_id
    state, intents = run_to_idle(state, [summarised(state, compaction)])  # late: ignored
    assert state.status is Status.CANCELLED and project(state, "llm_context")[0] == {
        "role": "user",
        "content": "a",
    }


def test_compaction_limits_come_from_settings_and_a_bad_value_is_named() -> None:
    assert compaction_limits(Limits(), {"compact_at": 0.5}).compact_at == 0.5
    assert compaction_limits(Limits(), {}).compact_at == 0.8
    with pytest.raises(JidoError) as bad:
        compaction_limits(Limits(), {"compact_at": 1.5})
    assert bad.value.type == "llm_invalid_settings" and "compact_at" in bad.value.message
    with pytest.raises(JidoError, match="compact_keep_turns"):
        compaction_limits(Limits(), {"compact_keep_turns": 0})


def test_the_summary_prompt_is_a_plain_transcript() -> None:
    messages = [
        {"role": "user", "content": "read a"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"function": {"name": "read", "arguments": "{}"}}],
        },
        {"role": "tool", "name": "read", "content": "x" * 5000},
    ]
    text = transcript(messages)
    assert "user: read a" in text and "assistant calls read({})" in text
    assert "[…1000 characters cut]" in text
    prompt = summary_prompt(messages, "keep the file names")
    assert [m["role"] for m in prompt] == ["system", "user"]
    assert prompt[1]["content"].endswith("keep in particular: keep the file names")


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.text(max_size=200), min_size=1, max_size=8),
    st.lists(st.text(max_size=200), max_size=4),
    st.text(min_size=1, max_size=100),
    st.integers(0, 100_000),
)
def test_token_counts_shrink_with_a_short_summary(
    summarised_texts: list[str], kept_texts: list[str], summary: str, reported: int
) -> None:
    old = [{"role": "user", "content": t} for t in summarised_texts]
    kept = [{"role": "user", "content": t} for t in kept_texts]
    before, after = token_counts(reported, old, kept, summary)
    assert before == (reported or estimate_tokens([*old, *kept]))
    new = estimate_tokens([summary_message(summary), *kept])
    if new <= estimate_tokens([*old, *kept]):
        assert after <= before
    assert after >= 0


turns = st.lists(st.tuples(st.integers(0, 2), st.integers(10, 1000), st.booleans()), min_size=1, max_size=12)


@settings(max_examples=80, deadline=None)
@given(turns, st.integers(1, 3))
def test_the_context_stays_a_valid_transcript_and_replay_equals_live(
    script: list[tuple[int, int, bool]], keep: int
) -> None:
    """Any mix of turns, tool calls, fills and compactions: every tool message follows the
    assistant message that called it, the summary (if any) comes first, and replay == live."""
    state = _start(Limits(compact_at=0.5, compact_keep_turns=keep))
    for n, (calls, tokens, manual) in enumerate(script):
        pending: list[Signal] = [user(f"u{n}")]
        if manual:
            pending.insert(0, sig("conversation.compact", {}))
        for _ in range(20):
            if not pending:
                break
            state, intents = run_to_idle(state, [pending.pop(0)])
            compaction = next((i for i in intents if isinstance(i, RunCompaction)), None)
            if compaction is not None:
                pending.insert(0, summarised(state, compaction, f"summary {n}"))
            elif state.pending_tool_calls:
                pending.extend(tool_result(state, i) for i in range(len(state.pending_tool_calls)))
            elif state.pending_llm is not None:
                pending.append(answer(state, f"a{n}", tokens=tokens, calls=calls if not pending else 0))
                calls = 0
        context = project(state, "llm_context")
        called: set[str] = set()
        for index, message in enumerate(context):
            if message["content"] is not None and str(message["content"]).startswith(SUMMARY_PREFIX):
                assert index == 0
            for call in message.get("tool_calls") or ():
                called.add(call["id"])
            if message["role"] == "tool":
                assert message["tool_call_id"] in called
        assert context[-1]["role"] in ("user", "assistant", "tool")
    rebuilt = replay("p", "c", state.timeline, state.limits)
    assert project(rebuilt, "llm_context") == project(state, "llm_context")
    assert rebuilt.model_dump() == state.model_dump()


def test_the_turn_tracker_waits_out_an_overflow_that_a_compaction_turns_around() -> None:
    """The SDK asks nothing after an overflow: the reducer's turn end says how the turn went."""
    from jidocode.client import TurnTracker

    state = _start(Limits(compact_at=0.0, compact_keep_turns=1))
    state, _ = run_to_idle(state, [user("a")])
    state, _ = run_to_idle(state, [answer(state, "A", tokens=10)])
    state, _ = run_to_idle(state, [user("b", id="m")])
    state, intents = run_to_idle(state, [overflow(state)])
    state, _ = run_to_idle(state, [summarised(state, _one(intents, RunCompaction))])
    state, _ = run_to_idle(state, [answer(state, "ok")])
    tracker = TurnTracker(message_id="m", correlation_id="m")
    outcomes = [
        tracker.feed(e.type, e.data, event_id=e.id, correlation_id=e.correlation_id) for e in state.timeline
    ]
    assert outcomes[-1] is not None and (outcomes[-1].status, outcomes[-1].text) == ("answered", "ok")
    assert outcomes.count(None) == len(outcomes) - 1  # nothing before the turn's end decided it
    # an overflow that overflows again after its retry ends the turn failed
    state, _ = run_to_idle(state, [user("c", id="n")])
    state, intents = run_to_idle(state, [overflow(state)])
    state, _ = run_to_idle(state, [summarised(state, _one(intents, RunCompaction))])
    state, _ = run_to_idle(state, [overflow(state)])
    other = TurnTracker(message_id="n", correlation_id="n")
    for e in state.timeline:
        ended = other.feed(e.type, e.data, event_id=e.id, correlation_id=e.correlation_id)
    assert ended is not None and (ended.status, ended.error_type) == ("failed", "llm_context_overflow")


def test_the_limits_of_compaction_input_are_enforced() -> None:
    from jidocode.services.conversation import compaction
    from jidocode.services.conversation.core import normalize
    from jidocode.shared.errors import InvalidInput

    # the transcript sent for a summary keeps its newest MAX_TRANSCRIPT_CHARS characters
    many = [{"role": "user", "content": f"m{i} " + "y" * 1000} for i in range(500)]
    text = compaction.transcript(many)
    assert len(text) <= compaction.MAX_TRANSCRIPT_CHARS + 40
    assert text.startswith("[…the oldest part is cut]") and "m499 " in text and "m0 " not in text
    # what to keep is at most 4,000 characters
    raw = {"id": "k", "type": "conversation.compact", "data": {"instructions": "z" * 4001}}
    with pytest.raises(InvalidInput, match="instructions"):
        normalize(raw, external=True)
    assert (
        normalize({**raw, "data": {"instructions": "z" * 4000}}, external=True).type == "conversation.compact"
    )
