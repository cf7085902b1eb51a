"""The routes table (who publishes and who acts on each event) covers the catalogue and matches the code."""

from __future__ import annotations

from functools import cache
from pathlib import Path

import pytest

from jidocode.shared import subjects
from jidocode.shared.contract import INPUT_RECEIVERS, NOT_JOURNALED, OUTPUT_SENDERS, SIGNALS
from jidocode.shared.events import ALL_EVENTS, EventModel, event_class
from jidocode.shared.events.conversation import EXTERNAL_TYPES

ROOT = Path(__file__).resolve().parents[2]


def _types(channel: str) -> set[str]:
    return {str(m.model_fields["type"].default) for m in ALL_EVENTS if m.channel == channel}


@cache
def _source(service: str) -> str:
    return "\n".join(p.read_text() for p in sorted((ROOT / "services" / service).rglob("*.py")))


def _mentions(service: str, event_type: str) -> bool:
    """The service's code names the type, or its catalogue model."""
    model: type[EventModel] | None = event_class(event_type)
    text = _source(service)
    return f'"{event_type}"' in text or (model is not None and model.__name__ in text)


def test_every_signal_has_a_route() -> None:
    assert set(SIGNALS) == _types("signal")


def test_input_and_output_tables_name_conversation_types() -> None:
    assert set(INPUT_RECEIVERS) == EXTERNAL_TYPES
    assert set(OUTPUT_SENDERS) <= _types("conversation")
    assert set(NOT_JOURNALED) <= _types("conversation")


def test_every_party_is_a_service() -> None:
    parties = {p for r in SIGNALS.values() for p in (*r.senders, *r.receivers)}
    parties |= {p for senders in OUTPUT_SENDERS.values() for p in senders}
    parties |= {p for receivers in INPUT_RECEIVERS.values() for p in receivers}
    assert parties <= set(subjects.SERVICE_NAMES)
    assert all(route.senders for route in SIGNALS.values())


@pytest.mark.parametrize("event_type", sorted(SIGNALS))
def test_signal_routes_match_the_code(event_type: str) -> None:
    route = SIGNALS[event_type]
    for service in (*route.senders, *route.receivers):
        assert _mentions(service, event_type), f"services/{service} never names {event_type}"


@pytest.mark.parametrize("event_type", sorted(OUTPUT_SENDERS))
def test_output_senders_match_the_code(event_type: str) -> None:
    for service in OUTPUT_SENDERS[event_type]:
        assert _mentions(service, event_type), f"services/{service} never names {event_type}"


def test_the_tool_runner_reads_approval_answers() -> None:
    assert _mentions("tool_runner", "conversation.approval.response")
