"""The event catalogue: one discriminated union, each type once, clear errors."""

from __future__ import annotations

import pytest

from jidocode.shared import events
from jidocode.shared.errors import (
    ErrorInfo,
    InvalidInput,
    NotFound,
    RemoteError,
    ServiceUnavailable,
    from_info,
)
from jidocode.shared.events import ALL_EVENTS, EVENT_TYPES, event_class, parse_event
from jidocode.shared.events.engine import ProjectStarted


def test_every_model_has_a_literal_type_with_a_default() -> None:
    for cls in ALL_EVENTS:
        assert isinstance(cls.model_fields["type"].default, str), cls


def test_type_names_are_unique_and_lookup_works() -> None:
    assert len(EVENT_TYPES) == len(ALL_EVENTS)
    for cls in ALL_EVENTS:
        assert event_class(cls.model_fields["type"].default) is cls


def test_union_validates_through_the_discriminator() -> None:
    from pydantic import TypeAdapter

    adapter = TypeAdapter(events.AnyEvent)
    event = adapter.validate_python({"type": "project.started", "project_id": "P", "root_path": "/r"})
    assert isinstance(event, ProjectStarted)


def test_parse_event_errors_name_the_problem() -> None:
    with pytest.raises(InvalidInput, match="unknown event type 'nope'"):
        parse_event("nope", {})
    with pytest.raises(InvalidInput, match="needs an object"):
        parse_event("project.started", [1])
    with pytest.raises(InvalidInput, match="root_path: Field required"):
        parse_event("project.started", {"project_id": "P"})


def test_event_data_excludes_the_type() -> None:
    assert ProjectStarted(project_id="P", root_path="/r").to_data() == {
        "project_id": "P",
        "root_path": "/r",
        "data_dir": ".jido",
    }


@pytest.mark.parametrize(
    ("info", "cls"),
    [
        (ErrorInfo(type="not_found", message="m"), NotFound),
        (ErrorInfo(type="service_unavailable", message="m", retryable=True), ServiceUnavailable),
        (ErrorInfo(type="llm_rate_limited", message="m", retryable=True), RemoteError),
    ],
)
def test_error_info_round_trips_to_typed_errors(info: ErrorInfo, cls: type) -> None:
    err = from_info(info)
    assert isinstance(err, cls) and err.type == info.type and err.retryable == info.retryable
    assert err.to_info() == info
