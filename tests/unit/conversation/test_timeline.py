"""The shared, append-only timeline: views never change, branches copy, the key index and folds."""

from __future__ import annotations

import pytest

from jidocode.services.conversation.core import (
    ConversationState,
    Signal,
    Timeline,
    drain,
    ingest,
    initial_state,
    run_to_idle,
)

from ._helpers import llm_done, sig, user


def _entries(n: int) -> list[Signal]:
    return [sig("conversation.resume", id=f"e{i}") for i in range(n)]


class _Count:
    """A fold that counts what it was fed."""

    def __init__(self) -> None:
        self.ids: list[str] = []

    def add(self, entry: Signal) -> None:
        self.ids.append(entry.id)


def test_a_view_never_sees_what_is_appended_after_it() -> None:
    a, b, c = _entries(3)
    one = Timeline().append(a)
    two = one.append(b)
    assert list(one) == [a] and len(one) == 1 and one[-1] == a
    assert list(two) == [a, b] and two[0:2] == (a, b) and two[::-1] == (b, a)
    # appending to the older view is a branch: its own copy, the newer view unchanged
    other = one.append(c)
    assert list(other) == [a, c] and list(two) == [a, b] and list(one) == [a]
    with pytest.raises(IndexError):
        one[1]


def test_equality_with_views_and_sequences() -> None:
    a, b = _entries(2)
    built = Timeline().append(a).append(b)
    assert built == Timeline([a, b]) and built == (a, b) and built == [a, b]
    assert built != (a,) and built != Timeline([b, a])
    assert built.prefix(1) == (a,)
    assert (built == "ab") is False


def test_key_index_sees_only_the_view() -> None:
    a, b = _entries(2)
    one = Timeline([a])
    two = one.append(b)
    assert two.has(b.key()) and not one.has(b.key()) and one.has(a.key())
    assert not two.has((b.id, "another correlation"))


def test_a_fold_is_fed_each_entry_once_and_an_older_view_gets_its_own() -> None:
    entries = _entries(5)
    timeline = Timeline(entries[:3])
    assert timeline.fold(_Count).ids == ["e0", "e1", "e2"]
    longer = timeline.append(entries[3]).append(entries[4])
    kept = longer.fold(_Count)
    assert kept.ids == ["e0", "e1", "e2", "e3", "e4"]  # the same fold, fed the two new entries
    assert longer.fold(_Count) is kept
    assert timeline.fold(_Count).ids == ["e0", "e1", "e2"]  # an older view: a fresh fold
    assert longer.fold(_Count) is kept


def test_a_state_field_takes_any_sequence_of_signals() -> None:
    a, b = _entries(2)
    state = ConversationState(project_id="p", conversation_id="c", timeline=(a, b))  # type: ignore[arg-type]
    assert isinstance(state.timeline, Timeline) and state.timeline == (a, b)
    dumped = state.model_dump(mode="json")["timeline"]
    assert [e["id"] for e in dumped] == ["e0", "e1"]


def test_steps_share_the_timeline_and_older_states_stay_as_they_were() -> None:
    s1, _ = run_to_idle(initial_state("p", "c"), [user("one", id="u1")])
    frozen = list(s1.timeline)
    s2, _ = run_to_idle(s1, [llm_done(s1, "answer")])
    assert list(s1.timeline) == frozen and s2.timeline[: len(frozen)] == tuple(frozen)
    assert s2.timeline.prefix(len(s1.timeline)) == s1.timeline
    # taking the same step again from the older state gives the same state (a branch)
    again, _ = run_to_idle(s1, [llm_done(s1, "answer")])
    assert again == s2 and list(s1.timeline) == frozen


def test_a_queued_or_applied_signal_is_a_duplicate() -> None:
    state = initial_state("p", "c")
    message = user("hi", id="u1")
    state, _ = ingest(state, message)
    assert state.is_seen(message) and ingest(state, message)[0] is state
    state, _ = drain(state)
    assert state.is_seen(message) and ingest(state, message)[0] is state
    assert not state.is_seen(user("hi", id="u1", correlation_id="other"))
