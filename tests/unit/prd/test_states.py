"""Loop state transitions: every pair of states against the table."""

from __future__ import annotations

import itertools

import pytest

from jidocode.services.prd.states import TERMINAL, TRANSITIONS, can_transition, transition
from jidocode.shared.errors import Conflict
from jidocode.shared.events.prd import LOOP_STATES, LoopState

ALLOWED = {
    ("ready", "running"),
    ("running", "paused"),
    ("running", "stopped"),
    ("running", "error"),
    ("running", "completed"),
    ("paused", "running"),
    ("paused", "stopped"),
    ("paused", "error"),
}


def test_table_covers_every_state() -> None:
    assert set(TRANSITIONS) == set(LOOP_STATES)
    assert {(a, b) for a, targets in TRANSITIONS.items() for b in targets} == ALLOWED


@pytest.mark.parametrize(("current", "target"), list(itertools.product(LOOP_STATES, LOOP_STATES)))
def test_every_pair(current: LoopState, target: LoopState) -> None:
    if (current, target) in ALLOWED:
        assert can_transition(current, target)
        assert transition(current, target) == target
    else:
        assert not can_transition(current, target)
        with pytest.raises(Conflict) as info:
            transition(current, target)
        assert current in info.value.message and target in info.value.message
        assert info.value.details["allowed"] == sorted(TRANSITIONS[current])


def test_terminal_states_are_final() -> None:
    assert all(not TRANSITIONS[state] for state in TERMINAL)
    with pytest.raises(Conflict, match="completed is final"):
        transition("completed", "running")


def test_conflict_names_the_allowed_targets() -> None:
    with pytest.raises(Conflict, match="from ready it can go to running"):
        transition("ready", "paused")
