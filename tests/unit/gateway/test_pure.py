"""The gateway's pure parts: the bus filter, the id memory, SSE framing both ways, error statuses,
the OpenAPI document."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from hypothesis import given
from hypothesis import strategies as st

from jidocode.services.gateway.api import API_ROUTES
from jidocode.services.gateway.errors import STATUS_BY_TYPE, error_response
from jidocode.services.gateway.openapi import openapi_document
from jidocode.services.gateway.streams import BusFilter, RecentIds, error_event, sse_event
from jidocode.shared.envelope import Envelope
from jidocode.shared.errors import InvalidInput
from tests.sse_reader import read_sse


def _env(type_: str, project: str | None = "p1", conversation: str | None = "c1") -> Envelope:
    ext = {k: v for k, v in (("projectid", project), ("conversationid", conversation)) if v}
    return Envelope(id="e1", source="test", type=type_, data={"x": 1}).with_extensions(**ext)


def test_bus_filter_matches_project_conversation_and_type_patterns() -> None:
    flt = BusFilter("p1", "c1", ("conversation.assistant.*", "tool.completed"))
    assert flt.matches(_env("conversation.assistant.delta"))
    assert flt.matches(_env("tool.completed"))
    assert not flt.matches(_env("tool.completed.more"))
    assert not flt.matches(_env("conversation.user.message"))
    assert not flt.matches(_env("tool.completed", project="p2"))
    assert not flt.matches(_env("tool.completed", conversation="c2"))
    # an event without the extension still matches by its subject's tokens
    assert flt.matches(_env("tool.completed", None, None), "jido.evt.p1.c1.tool.completed")
    assert BusFilter().matches(_env("anything"))


@pytest.mark.parametrize("bad", ["", "conv*ersation", "a b", "*x"])
def test_bus_filter_refuses_a_bad_type_pattern(bad: str) -> None:
    with pytest.raises(InvalidInput, match="type filter"):
        BusFilter(types=(bad,))


@given(st.lists(st.text(alphabet="abc", min_size=1, max_size=3), max_size=200))
def test_recent_ids_remembers_at_most_its_size(ids: list[str]) -> None:
    recent = RecentIds(size=5)
    for event_id in ids:
        recent.first(event_id)
    assert len(recent._ids) <= 5
    if ids:
        assert not recent.first(ids[-1])  # the last one is remembered


async def _lines(text: str) -> AsyncIterator[str]:
    for line in text.split("\n"):
        yield line


async def test_sse_framing_round_trips() -> None:
    env = _env("conversation.assistant.delta")
    wire = (
        sse_event(env).encode() + b": ping\r\n\r\n" + error_event("overflow", "too far behind").encode()
    ).decode()
    got = [m async for m in read_sse(_lines(wire.replace("\r\n", "\n")))]
    assert [(m.event, m.id) for m in got] == [("conversation.assistant.delta", "e1"), ("error", None)]
    assert got[0].json()["data"] == {"x": 1} and got[0].json()["projectid"] == "p1"
    assert got[1].json() == {"error": {"type": "overflow", "message": "too far behind"}}


async def test_read_sse_joins_data_lines_and_skips_comments() -> None:
    got = [m async for m in read_sse(_lines(": hello\nid: 7\ndata: a\ndata: b\n\nevent: x\ndata:c\n\n"))]
    assert [(m.id, m.event, m.data) for m in got] == [("7", "message", "a\nb"), (None, "x", "c")]


def test_error_statuses_follow_the_error_type() -> None:
    assert STATUS_BY_TYPE["not_found"] == 404 and STATUS_BY_TYPE["conflict"] == 409
    assert STATUS_BY_TYPE["validation_error"] == 422 and STATUS_BY_TYPE["timeout"] == 503
    assert error_response("something_else", "x").status_code == 502


def test_openapi_has_every_route_of_the_table() -> None:
    doc = openapi_document()
    for spec in API_ROUTES:
        assert spec.method.lower() in doc["paths"][spec.path]
    assert {"bearer", "cookie"} == set(doc["components"]["securitySchemes"])
