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


def test_the_catalogue_refuses_a_type_defined_twice_and_a_command_without_a_reply() -> None:
    from typing import Literal

    from jidocode.shared.events import Command, EventModel, build_catalogue

    class First(EventModel):
        type: Literal["x.same"] = "x.same"

    class Second(EventModel):
        type: Literal["x.same"] = "x.same"

    with pytest.raises(TypeError, match=r"'x\.same' is defined twice: First and Second"):
        build_catalogue((First, Second))

    class Asks(Command[First]):
        type: Literal["x.asks"] = "x.asks"

    with pytest.raises(TypeError, match="command Asks must name a catalogue reply"):
        build_catalogue((Asks,))
    assert build_catalogue((First, Asks)).by_type == {"x.same": First, "x.asks": Asks}


def test_importing_the_package_builds_no_model_until_the_catalogue_is_asked_for() -> None:
    """A CLI command that names one domain's events imports that domain only (issue 25, point 4)."""
    import subprocess
    import sys

    probe = (
        "import sys; from jidocode.shared.events import EventModel, parse_event; "
        "from jidocode.shared.events.engine import ProjectInfo; "
        "before = sorted(m for m in sys.modules if m.startswith('jidocode.shared.events.')); "
        "parse_event('project.started', {'project_id': 'P', 'root_path': '/r'}); "
        "after = sorted(m for m in sys.modules if m.startswith('jidocode.shared.events.')); "
        "print(' '.join(before)); print(' '.join(after))"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=True
    )
    before, after = (line.split() for line in out.stdout.splitlines())
    assert set(before) == {
        "jidocode.shared.events._base",
        "jidocode.shared.events.common",
        "jidocode.shared.events.engine",
    }
    assert {"jidocode.shared.events.prd", "jidocode.shared.events.conversation"} <= set(after)
