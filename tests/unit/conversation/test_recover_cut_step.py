"""A conversation killed between the journal appends of one step carries on once rebuilt.

Found by the chaos test (``tests/chaos``): a step of the reducer journals up to four entries one
fenced append at a time (``Journal.append_many``, ``SMALL_BATCH``), so a SIGKILL of the
conversation service can leave the journal ending after the first entry of a step
(``tool.completed``) without the rest (``llm.requested`` and its ``RunLlm``). ``replay`` alone
then waits for nothing (9 of 37 conversations in flight at a kill were stuck so). ``resume``
takes the last step again from the state before it: the same entries come out (the reducer is
deterministic, its ids come from the state), the missing ones are emitted, and the directive
the step leads to is started.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jidocode.services.conversation.core import (
    Emit,
    RunLlm,
    RunToolIntent,
    initial_state,
    recover,
    replay,
    resume,
    run_to_idle,
)

from ._helpers import calls, llm_done, tool_done, user


def _turn_with_two_tools() -> tuple[list[list[str]], list]:
    """The entries of each step of a turn with two tool calls, by type, and the whole journal."""
    state, first = run_to_idle(initial_state("p", "c"), [user(id="u1")])
    state, second = run_to_idle(state, [llm_done(state, "", calls("bash", "grep"))])
    state, third = run_to_idle(state, [tool_done(state, 0)])
    state, fourth = run_to_idle(state, [tool_done(state, 0)])
    state, fifth = run_to_idle(state, [llm_done(state, "all done")])
    steps = [
        [i.entry.type for i in step if isinstance(i, Emit)] for step in (first, second, third, fourth, fifth)
    ]
    return steps, list(state.timeline)


def test_the_steps_of_a_turn_journal_several_entries() -> None:
    steps, _ = _turn_with_two_tools()
    assert steps == [
        ["conversation.user.message", "conversation.llm.requested"],
        ["conversation.llm.completed", "conversation.tool.requested", "conversation.tool.requested"],
        ["conversation.tool.completed"],
        ["conversation.tool.completed", "conversation.llm.requested"],
        ["conversation.llm.completed", "conversation.assistant.message", "conversation.turn.ended"],
    ]


@pytest.mark.parametrize(
    ("cut_after", "next_directive"),
    [
        ("conversation.user.message", RunLlm),
        ("conversation.llm.completed", RunToolIntent),
    ],
)
def test_a_step_cut_short_by_a_crash_is_carried_on(cut_after: str, next_directive: type) -> None:
    _, journal = _turn_with_two_tools()
    cut = [e.type for e in journal].index(cut_after)
    kept = journal[: cut + 1]  # the kill came after this append, before the next
    assert not any(isinstance(i, next_directive) for i in recover(replay("p", "c", kept)))  # stuck before
    state, intents = resume("p", "c", kept)
    emitted = [i.entry for i in intents if isinstance(i, Emit)]
    # the missing entries of the step, exactly as first made (same ids), then its directive
    step_end = next(
        (i for i in range(cut + 1, len(journal)) if journal[i].source != "conversation/core"), len(journal)
    )
    assert [e.id for e in emitted] == [e.id for e in journal[cut + 1 : step_end]]
    assert [e.data for e in emitted] == [e.data for e in journal[cut + 1 : step_end]]
    assert any(isinstance(i, next_directive) for i in intents)
    assert state == replay("p", "c", journal[:step_end])  # the state after the whole step


def test_a_cut_in_the_last_step_of_several_tool_results() -> None:
    _, journal = _turn_with_two_tools()
    second_result = [i for i, e in enumerate(journal) if e.type == "conversation.tool.completed"][1]
    _, intents = resume("p", "c", journal[: second_result + 1])
    assert [i.entry.type for i in intents if isinstance(i, Emit)] == ["conversation.llm.requested"]
    assert any(isinstance(i, RunLlm) for i in intents)


def test_a_whole_journal_is_only_recovered() -> None:
    _, journal = _turn_with_two_tools()
    for end in range(len(journal) + 1):
        prefix = journal[:end]
        state, intents = resume("p", "c", prefix)
        if end == len(journal) or journal[end].source != "conversation/core":
            # the prefix ends on a step boundary: nothing to carry on, only what recover says
            assert state == replay("p", "c", prefix)
            assert intents == recover(state)


@given(st.integers(min_value=0, max_value=40))
@settings(max_examples=60, deadline=None)
def test_resuming_any_prefix_ends_in_the_journal_that_was_written(end: int) -> None:
    """Whatever append the crash interrupted, resuming writes exactly the entries that were lost
    of that step: the journal then continues as the uninterrupted run wrote it."""
    _, journal = _turn_with_two_tools()
    prefix = journal[: min(end, len(journal))]
    _, intents = resume("p", "c", prefix)
    carried = [i.entry for i in intents if isinstance(i, Emit)]
    rebuilt = prefix + carried
    assert [e.id for e in rebuilt] == [e.id for e in journal[: len(rebuilt)]]
