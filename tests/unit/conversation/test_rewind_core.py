"""The reducer's rewind (decision 0335): ``conversation.rewound`` moves ``llm_context`` back."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from jidocode.services.conversation.core import (
    ConversationState,
    Emit,
    RunLlm,
    initial_state,
    llm_context,
    replay,
    run_to_idle,
)
from jidocode.shared.events.conversation import ConversationError, Rewound, TurnEnded, UserMessage

from ._helpers import llm_done, sig, tool_done, user


def _turn(state: ConversationState, text: str, tools: int = 0) -> ConversationState:
    """``state`` after a user message answered (with ``tools`` tool calls first, then a text)."""
    state, _ = run_to_idle(state, [user(text)])
    if tools:
        calls = [{"id": f"c{i}", "name": "read", "arguments": {"i": i}} for i in range(tools)]
        state, _ = run_to_idle(state, [llm_done(state, "", calls)])
        for _ in range(tools):
            state, _ = run_to_idle(state, [tool_done(state, 0)])
    state, _ = run_to_idle(state, [llm_done(state, f"answer to {text}")])
    return state


def _rewind(state: ConversationState, ref: str) -> tuple[ConversationState, list[Any]]:
    state, intents = run_to_idle(state, [sig("conversation.rewind", {"message_id": ref})])
    return state, [i.entry for i in intents if isinstance(i, Emit)]


def _position(state: ConversationState, message_id: str) -> int:
    return next(i for i, e in enumerate(state.timeline) if e.id == message_id)


def _messages(state: ConversationState) -> list[str]:
    return [e.id for e in state.timeline if e.type == UserMessage.TYPE]


def test_rewind_moves_the_context_back_before_the_message_and_keeps_the_timeline() -> None:
    state = _turn(_turn(initial_state("p", "c"), "first"), "second", tools=2)
    second = _messages(state)[1]
    before = llm_context(state.timeline[: _position(state, second)])
    length = len(state.timeline)

    state, emitted = _rewind(state, second)

    entry = emitted[-1].event_as(Rewound)
    assert (entry.message_id, entry.text, entry.to_index) == (second, "second", _position(state, second))
    assert entry.kept == len(before) and entry.dropped == 1 + 3 + 1  # user, calls + 2 results, answer
    assert llm_context(state.timeline) == before
    assert len(state.timeline) == length + 2  # the input and its answer: nothing removed


def test_the_next_turn_asks_the_model_with_the_context_before_the_rewound_message() -> None:
    state = _turn(_turn(initial_state("p", "c"), "first"), "second")
    before = llm_context(state.timeline[: _position(state, _messages(state)[1])])
    state, _ = _rewind(state, _messages(state)[1])

    state, intents = run_to_idle(state, [user("instead")])

    (call,) = [i for i in intents if isinstance(i, RunLlm)]
    assert list(call.messages) == [*before, {"role": "user", "content": "instead"}]


def test_a_turn_id_names_the_first_message_it_answered() -> None:
    state = _turn(_turn(initial_state("p", "c"), "first"), "second")
    turn = [e for e in state.timeline if e.type == TurnEnded.TYPE][1]

    state, emitted = _rewind(state, turn.id)

    assert emitted[-1].event_as(Rewound).message_id == _messages(state)[1]


def _refusal(emitted: list[Any]) -> dict[str, Any]:
    error = emitted[-1].event_as(ConversationError)
    assert error.error_type == "rewind_refused"
    return {"reason": error.details["reason"], "message": error.message}


def test_an_unknown_message_is_refused_and_changes_no_context() -> None:
    state = _turn(initial_state("p", "c"), "first")
    context = llm_context(state.timeline)

    state, emitted = _rewind(state, "another-conversations-message")

    assert _refusal(emitted)["reason"] == "unknown_message"
    assert "another-conversations-message" in _refusal(emitted)["message"]
    assert llm_context(state.timeline) == context


def test_a_rewind_while_a_turn_runs_is_refused() -> None:
    state = _turn(initial_state("p", "c"), "first")
    state, _ = run_to_idle(state, [user("second")])  # the model call is under way

    state, emitted = _rewind(state, _messages(state)[0])

    assert _refusal(emitted)["reason"] == "turn_running"
    assert state.pending_llm is not None


def test_a_message_rewound_away_cannot_be_rewound_to_again() -> None:
    state = _turn(_turn(initial_state("p", "c"), "first"), "second")
    first, second = _messages(state)
    state, _ = _rewind(state, first)

    state, emitted = _rewind(state, second)

    assert _refusal(emitted)["reason"] == "not_in_context"
    assert llm_context(state.timeline) == []


def test_a_rewind_while_cancelled_is_answered_and_drops_the_waiting_message() -> None:
    state = _turn(initial_state("p", "c"), "first")
    state, _ = run_to_idle(state, [sig("conversation.cancel"), user("while cancelled")])
    assert state.unanswered

    state, emitted = _rewind(state, _messages(state)[1])

    assert emitted[-1].type == Rewound.TYPE
    assert not state.unanswered and not state.waiting_messages
    state, intents = run_to_idle(state, [sig("conversation.resume")])
    assert not [i for i in intents if isinstance(i, RunLlm)]


def test_replay_of_the_journal_gives_the_live_state() -> None:
    state = _turn(_turn(initial_state("p", "c"), "first", tools=1), "second")
    state, _ = _rewind(state, _messages(state)[1])
    state = _turn(state, "third")

    rebuilt = replay("p", "c", list(state.timeline))

    assert rebuilt == state
    assert llm_context(rebuilt.timeline) == llm_context(state.timeline)


@settings(max_examples=40, deadline=None)
@given(tools=st.lists(st.integers(0, 2), min_size=1, max_size=5), data=st.data())
def test_rewinding_to_message_k_gives_the_context_of_the_messages_before_it(
    tools: list[int], data: st.DataObject
) -> None:
    state = initial_state("p", "c")
    for n, calls in enumerate(tools):
        state = _turn(state, f"m{n}", tools=calls)
    k = data.draw(st.integers(0, len(tools) - 1))
    target = _messages(state)[k]
    before = llm_context(state.timeline[: _position(state, target)])

    state, _ = _rewind(state, target)
    state = _turn(state, "again")

    expected = [
        *before,
        {"role": "user", "content": "again"},
        {"role": "assistant", "content": "answer to again"},
    ]
    assert llm_context(state.timeline) == expected
    assert llm_context(replay("p", "c", list(state.timeline)).timeline) == expected
