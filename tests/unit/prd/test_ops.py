"""Story selection and transitions, and their invariants under any sequence of operations."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jidocode.services.prd.model import MAX_NOTES_CHARS, Prd, story_state
from jidocode.services.prd.ops import (
    NOTES_CUT,
    mark_in_progress,
    mark_passed,
    next_story,
    record_attempt,
    reset_story,
)
from jidocode.shared.errors import Conflict, NotFound

from .conftest import doc, story


def make(*stories: dict[str, object]) -> Prd:
    return Prd.model_validate(doc(*stories))


def test_next_story_lowest_priority_then_file_order() -> None:
    prd = make(story("a", priority=2), story("b", priority=1), story("c", priority=1))
    chosen = next_story(prd)
    assert chosen is not None and chosen.id == "b"


def test_next_story_sticky_in_progress_wins_over_priority() -> None:
    prd = make(story("a", priority=0), story("b", priority=9, inProgress=True))
    chosen = next_story(prd)
    assert chosen is not None and chosen.id == "b"


def test_next_story_skips_passed_and_none_when_done() -> None:
    assert next_story(make(story("a", passes=True), story("b", priority=5))).id == "b"  # type: ignore[union-attr]
    assert next_story(make(story("a", passes=True))) is None
    assert next_story(make()) is None


def test_full_path_and_immutability() -> None:
    prd = make(story("a"))
    started = mark_in_progress(prd, "a")
    assert story_state(prd.user_stories[0]) == "pending"  # the input is untouched
    assert story_state(started.user_stories[0]) == "in_progress"
    assert mark_in_progress(started, "a") == started  # idempotent for a resumed loop
    done = mark_passed(started, "a")
    assert story_state(done.user_stories[0]) == "passed"
    assert story_state(reset_story(done, "a").user_stories[0]) == "pending"


def test_another_story_in_progress_is_conflict() -> None:
    prd = mark_in_progress(make(story("a"), story("b")), "a")
    with pytest.raises(Conflict, match="'a' of PRD 'auth' is in progress") as info:
        mark_in_progress(prd, "b")
    assert info.value.details["in_progress"] == "a"


def test_passed_story_cannot_start_again() -> None:
    with pytest.raises(Conflict, match="is passed"):
        mark_in_progress(make(story("a", passes=True)), "a")


@pytest.mark.parametrize(("flags", "state"), [({}, "pending"), ({"passes": True}, "passed")])
def test_mark_passed_needs_in_progress(flags: dict[str, bool], state: str) -> None:
    with pytest.raises(Conflict, match=f"is {state}, not in_progress") as info:
        mark_passed(make(story("a", **flags)), "a")
    assert info.value.details["state"] == state


@pytest.mark.parametrize("op", [mark_in_progress, mark_passed, record_attempt, reset_story])
def test_unknown_story_is_not_found(op: object) -> None:
    with pytest.raises(NotFound, match="no story 'zz'"):
        op(make(story("a")), "zz")  # type: ignore[operator]


def test_record_attempt_counts_and_appends_notes() -> None:
    prd = record_attempt(make(story("a")), "a", "check failed: 1 test")
    prd = record_attempt(prd, "a")
    prd = record_attempt(prd, "a", "passed")
    only = prd.user_stories[0]
    assert only.attempts == 3
    assert only.notes == "check failed: 1 test\npassed"
    assert story_state(only) == "pending"


def test_record_attempt_cleans_a_coloured_check_output() -> None:
    prd = record_attempt(make(story("a")), "a", "\x1b[31mFAILED\x1b[0m tests/test_x.py\r\n\x00")
    assert prd.user_stories[0].notes == "FAILED tests/test_x.py\n"


def test_record_attempt_keeps_the_newest_notes_within_the_cap() -> None:
    prd = make(story("a"))
    for i in range(5):
        prd = record_attempt(prd, "a", f"{i}" * 6000)
    notes = prd.user_stories[0].notes
    assert len(notes) == MAX_NOTES_CHARS
    assert notes.startswith(NOTES_CUT)
    assert notes.endswith("4" * 6000)


def test_reset_keeps_history_and_pending_is_noop() -> None:
    prd = record_attempt(mark_in_progress(make(story("a")), "a"), "a", "note")
    back = reset_story(prd, "a")
    assert back.user_stories[0].attempts == 1 and back.user_stories[0].notes == "note"
    assert reset_story(back, "a") == back


# --- properties ---------------------------------------------------------------------------------

IDS = ["s0", "s1", "s2", "s3"]
OPS = {"start": mark_in_progress, "pass": mark_passed, "attempt": record_attempt, "reset": reset_story}


@settings(max_examples=100, deadline=None)
@given(
    st.lists(st.integers(0, 3), min_size=1, max_size=4),
    st.lists(st.tuples(st.sampled_from(sorted(OPS)), st.sampled_from(IDS)), max_size=30),
)
def test_any_sequence_keeps_the_invariants(priorities: list[int], ops: list[tuple[str, str]]) -> None:
    prd = make(*(story(IDS[i], priority=p) for i, p in enumerate(priorities)))
    for name, sid in ops:
        try:
            prd = OPS[name](prd, sid)
        except (Conflict, NotFound):
            continue  # refused: the PRD is unchanged
        assert sum(s.in_progress for s in prd.user_stories) <= 1
        assert not any(s.in_progress and s.passes for s in prd.user_stories)
        chosen = next_story(prd)
        if chosen is None:
            assert all(s.passes for s in prd.user_stories)
        else:
            assert not chosen.passes
            running = [s for s in prd.user_stories if s.in_progress]
            if running:
                assert chosen.id == running[0].id
            else:
                lowest = min(s.priority for s in prd.user_stories if not s.passes)
                assert chosen.priority == lowest


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(0, 3), min_size=1, max_size=4))
def test_driving_next_story_to_the_end_passes_every_story_once(priorities: list[int]) -> None:
    prd = make(*(story(IDS[i], priority=p) for i, p in enumerate(priorities)))
    order = []
    while (chosen := next_story(prd)) is not None:
        prd = mark_passed(mark_in_progress(prd, chosen.id), chosen.id)
        order.append(chosen.id)
        assert len(order) <= len(priorities)
    assert sorted(order) == sorted(IDS[: len(priorities)])
    assert [priorities[IDS.index(i)] for i in order] == sorted(priorities)
