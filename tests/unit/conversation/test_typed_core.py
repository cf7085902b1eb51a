"""The typed core: entries are read through the catalogue's models, decoded once.

An entry from outside is decoded by :func:`normalize` (the edge) and keeps that model; an
entry the core mints keeps the model it was made from; an entry read back from the journal
(:meth:`Signal.trusted`) is built without validation, and must equal what validation gives.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings

from jidocode.services.conversation.core import Limits, Signal, normalize
from jidocode.shared.events import parse_event
from jidocode.shared.events.conversation import LlmCompleted, UserMessage

from .test_reducer_properties import Action, actions, drive, limits


def _reread(entry: Signal) -> Signal:
    """``entry`` as the journal codec reads it back."""
    return Signal.trusted(
        id=entry.id,
        type=entry.type,
        source=entry.source,
        data=entry.data,
        correlation_id=entry.correlation_id,
        causation_id=entry.causation_id,
        time=entry.time,
    )


def test_an_input_is_decoded_once_at_the_edge_and_keeps_its_model() -> None:
    signal = normalize(
        {"id": "u1", "type": "conversation.user.message", "data": {"text": "hi"}}, external=True
    )
    first = signal.event
    assert isinstance(first, UserMessage) and first.text == "hi"
    assert signal.event is first  # not decoded again


def test_a_journal_entry_missing_a_field_added_since_takes_its_default() -> None:
    old = Signal.trusted(
        id="r:result",
        type=LlmCompleted.TYPE,
        source="conversation/llm",
        data={"request_id": "r", "content": "ok", "tool_calls": [], "usage": {}, "model": "m"},
        correlation_id="u1",
        causation_id="r",
        time=None,
    )
    event = old.event_as(LlmCompleted)
    assert (event.offered_tools, event.context_window, event.finish_reason) == (None, 0, None)
    assert event == LlmCompleted.model_validate(old.data)


def test_an_entry_of_another_type_is_named() -> None:
    signal = Signal(id="x", type=UserMessage.TYPE, source="t", data={"text": "hi"}, correlation_id="x")
    with pytest.raises(
        TypeError, match=r"'conversation\.user\.message', not a 'conversation\.llm\.completed'"
    ):
        signal.event_as(LlmCompleted)


@settings(max_examples=100, deadline=None)
@given(actions, limits)
def test_a_journal_entry_built_without_validation_equals_the_validated_one(
    acts: list[Action], lim: Limits
) -> None:
    state, _, _ = drive(acts, lim)
    for entry in state.timeline:
        assert _reread(entry).event == parse_event(entry.type, entry.data), entry.type
