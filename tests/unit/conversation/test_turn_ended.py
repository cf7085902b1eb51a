"""``conversation.turn.ended`` (decision 0317): the reducer mints exactly one per turn, with its outcome.

One test per outcome (completed, failed, stopped, cancelled, and a completed turn after an
overflow was compacted and retried), the turn of a message that arrived mid-turn, a journal from
before the event, and a property over drawn event sequences: every turn the reducer opens ends
with exactly one entry, and no user message is ended twice.
"""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings

from jidocode.services.conversation.core import (
    ConversationState,
    Emit,
    Limits,
    RunCompaction,
    Signal,
    Status,
    initial_state,
    replay,
    resume,
    run_to_idle,
)
from jidocode.shared.events.conversation import TurnEnded

from ._helpers import llm_done, llm_fail, sig, tool_done, user
from .test_compaction_core import answer, overflow, summarised
from .test_reducer_properties import Action, actions, drive, limits

ENDED = TurnEnded.TYPE


def _ends(state: ConversationState) -> list[Signal]:
    return [e for e in state.timeline if e.type == ENDED]


def _one_end(state: ConversationState) -> dict[str, Any]:
    [ended] = _ends(state)
    return ended.data


def _calls(*names: str) -> list[dict[str, Any]]:
    return [{"id": f"c{i}", "name": n, "arguments": {}} for i, n in enumerate(names)]


def test_an_answered_turn_ends_completed_with_its_answer() -> None:
    state, _ = run_to_idle(initial_state("p", "c"), [user("hi", id="u1")])
    state, _ = run_to_idle(state, [llm_done(state, "", _calls("read"))])
    assert not _ends(state)  # a tool call is no end
    state, _ = run_to_idle(state, [tool_done(state)])
    state, _ = run_to_idle(state, [llm_done(state, "done")])
    ended = state.timeline[-1]
    assert ended.type == ENDED and ended.correlation_id == "u1"
    answer_entry = state.timeline[-2]
    assert (
        ended.data
        == TurnEnded(
            outcome="completed",
            message_ids=["u1"],
            answer_id=answer_entry.id,
            text="done",
            turns=2,
        ).to_data()
    )
    assert not state.turn_open and state.status is Status.IDLE


def test_a_failed_model_call_ends_the_turn_failed() -> None:
    state, _ = run_to_idle(initial_state("p", "c"), [user(id="u1")])
    state, _ = run_to_idle(state, [llm_fail(state)])
    end = _one_end(state)
    assert (end["outcome"], end["error_type"], end["message"]) == ("failed", "llm_error", "boom")
    assert end["message_ids"] == ["u1"]


def test_the_turn_limit_ends_the_turn_stopped() -> None:
    state, _ = run_to_idle(initial_state("p", "c", Limits(max_turns=1)), [user(id="u1")])
    state, _ = run_to_idle(state, [llm_done(state, "", _calls("read"))])
    state, _ = run_to_idle(state, [tool_done(state)])
    end = _one_end(state)
    assert (end["outcome"], end["error_type"]) == ("stopped", "max_turns")
    assert "after 1 of 1 turns" in end["message"]


def test_a_cancel_ends_the_turn_and_the_messages_waiting_in_it() -> None:
    state, _ = run_to_idle(initial_state("p", "c"), [user(id="u1")])
    state, _ = run_to_idle(state, [user(id="u2")])  # arrives while the model call runs
    state, _ = run_to_idle(state, [sig("conversation.cancel", {"reason": "stop"})])
    end = _one_end(state)
    assert (end["outcome"], end["message"], end["message_ids"]) == ("cancelled", "stop", ["u1", "u2"])
    # a cancel with no turn open ends nothing
    state, _ = run_to_idle(state, [sig("conversation.cancel", {})])
    assert len(_ends(state)) == 1
    # a resume answers the waiting message in a turn of its own, which ends once
    state, _ = run_to_idle(state, [sig("conversation.resume", {})])
    state, _ = run_to_idle(state, [llm_done(state, "late")])
    assert [e.data["outcome"] for e in _ends(state)] == ["cancelled", "completed"]


def test_a_message_arriving_mid_turn_gets_its_own_turn_end() -> None:
    state, _ = run_to_idle(initial_state("p", "c"), [user(id="u1")])
    state, _ = run_to_idle(state, [user(id="u2")])  # the pending call never saw it
    state, _ = run_to_idle(state, [llm_done(state, "to u1")])
    first = _one_end(state)
    assert (first["message_ids"], first["text"]) == (["u1"], "to u1")
    assert state.status is Status.AWAITING_LLM  # u2's turn started at once
    state, _ = run_to_idle(state, [llm_done(state, "to u2")])
    second = _ends(state)[1].data
    assert (second["message_ids"], second["text"]) == (["u2"], "to u2")


def test_an_overflow_compacted_and_retried_is_no_end_and_is_said_at_the_end() -> None:
    state = initial_state("p", "c", Limits(compact_at=0.0, compact_keep_turns=1))
    state, _ = run_to_idle(state, [user("a")])
    state, _ = run_to_idle(state, [answer(state, "A", tokens=10)])
    state, _ = run_to_idle(state, [user("b", id="ub")])
    state, intents = run_to_idle(state, [overflow(state)])
    assert len(_ends(state)) == 1  # the first turn's only
    [compaction] = [i for i in intents if isinstance(i, RunCompaction)]
    state, _ = run_to_idle(state, [summarised(state, compaction)])
    state, _ = run_to_idle(state, [answer(state, "B")])
    end = _ends(state)[-1].data
    assert (end["outcome"], end["text"], end["overflow_retried"]) == ("completed", "B", True)
    assert end["message_ids"] == ["ub"]


def test_an_overflow_whose_compaction_fails_or_that_overflows_again_ends_failed() -> None:
    state = initial_state("p", "c", Limits(compact_at=0.0, compact_keep_turns=1))
    state, _ = run_to_idle(state, [user("a")])
    state, _ = run_to_idle(state, [answer(state, "A", tokens=10)])
    state, _ = run_to_idle(state, [user("b")])
    state, intents = run_to_idle(state, [overflow(state)])
    [compaction] = [i for i in intents if isinstance(i, RunCompaction)]
    state, _ = run_to_idle(state, [summarised(state, compaction, ok=False)])
    end = _ends(state)[-1].data
    assert (end["outcome"], end["error_type"]) == ("failed", "llm_context_overflow")
    assert "compaction failed: no" in end["message"]
    # the retry overflowing again ends its turn with the overflow
    state, _ = run_to_idle(state, [user("c")])
    state, intents = run_to_idle(state, [overflow(state)])
    [compaction] = [i for i in intents if isinstance(i, RunCompaction)]
    state, _ = run_to_idle(state, [summarised(state, compaction)])
    state, _ = run_to_idle(state, [overflow(state)])
    end = _ends(state)[-1].data
    assert (end["outcome"], end["error_type"], end["overflow_retried"]) == (
        "failed",
        "llm_context_overflow",
        True,
    )


def test_an_overflow_with_nothing_to_compact_ends_failed_at_once() -> None:
    state, _ = run_to_idle(initial_state("p", "c"), [user("only")])
    state, _ = run_to_idle(state, [overflow(state)])
    end = _one_end(state)
    assert (end["outcome"], end["error_type"]) == ("failed", "llm_context_overflow")


def test_a_compact_asked_during_a_turn_lets_the_turn_go_on_to_its_end() -> None:
    state = initial_state("p", "c", Limits(compact_at=0.0, compact_keep_turns=1))
    state, _ = run_to_idle(state, [user("a")])
    state, _ = run_to_idle(state, [answer(state, "A")])
    state, _ = run_to_idle(state, [user("b")])
    state, _ = run_to_idle(state, [answer(state, "", calls=1)])
    state, _ = run_to_idle(state, [sig("conversation.compact", {})])
    state, intents = run_to_idle(state, [tool_done(state)])
    [compaction] = [i for i in intents if isinstance(i, RunCompaction)]
    state, _ = run_to_idle(state, [summarised(state, compaction)])
    assert state.status is Status.AWAITING_LLM  # the turn's next model call, after the summary
    state, _ = run_to_idle(state, [answer(state, "B")])
    assert [e.data["text"] for e in _ends(state)] == ["A", "B"]


def test_a_journal_from_before_the_event_replays_and_its_next_turn_ends_alone() -> None:
    state, _ = run_to_idle(initial_state("p", "c"), [user(id="u1")])
    state, _ = run_to_idle(state, [llm_done(state, "one")])
    old_journal = [e for e in state.timeline if e.type != ENDED]  # recorded before 0317
    rebuilt = replay("p", "c", old_journal)
    assert not rebuilt.turn_open and rebuilt.status is Status.IDLE
    rebuilt, _ = run_to_idle(rebuilt, [user(id="u2")])
    rebuilt, _ = run_to_idle(rebuilt, [llm_done(rebuilt, "two")])
    assert _one_end(rebuilt)["message_ids"] == ["u2"]
    # and an old turn in flight at the upgrade ends with an entry when it ends live
    in_flight, _ = run_to_idle(initial_state("p", "c"), [user(id="u3")])
    resumed = replay("p", "c", list(in_flight.timeline))
    resumed, _ = run_to_idle(resumed, [llm_done(resumed, "three")])
    assert _one_end(resumed)["message_ids"] == ["u3"]


@settings(max_examples=200, deadline=None)
@given(actions, limits)
def test_every_turn_the_reducer_opens_ends_exactly_once(acts: list[Action], lim: Limits) -> None:
    state, _, _ = drive(acts, lim)
    open_ = False
    ended_messages: list[str] = []
    for entry in state.timeline:
        if entry.type == "conversation.llm.requested":
            open_ = True
        elif entry.type == ENDED:
            cancel_of_waiting = entry.data["outcome"] == "cancelled" and entry.data["message_ids"]
            assert open_ or cancel_of_waiting, "a turn end with no turn open"
            open_ = False
            ended_messages += entry.data["message_ids"]
    assert open_ == state.turn_open
    if not state.event_queue and state.status in (Status.IDLE, Status.CANCELLED):
        assert not state.turn_open, "the conversation rests with a turn never ended"
    assert len(ended_messages) == len(set(ended_messages)), "a user message ended twice"
    users = {e.id for e in state.timeline if e.type == "conversation.user.message"}
    assert set(ended_messages) <= users


def test_a_step_cut_before_its_turn_end_gets_the_end_on_resume() -> None:
    """A crash between the answer's append and the turn end's: the rebuild journals the end."""
    state, _ = run_to_idle(initial_state("p", "c"), [user(id="u1")])
    state, _ = run_to_idle(state, [llm_done(state, "done")])
    journal = list(state.timeline)
    assert journal[-1].type == ENDED
    resumed, intents = resume("p", "c", journal[:-1])
    emitted = [i.entry for i in intents if isinstance(i, Emit)]
    assert [e.id for e in emitted] == [journal[-1].id] and emitted[0].data == journal[-1].data
    assert resumed == state
