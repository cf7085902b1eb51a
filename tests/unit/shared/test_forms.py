"""An approval's form (an MCP elicitation's schema) and the content answering it (pure)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from jidocode.shared.errors import InvalidInput
from jidocode.shared.events.conversation import ApprovalResponse
from jidocode.shared.forms import MAX_CONTENT_BYTES, MAX_STRING_CHARS, check_content, form_fields, value_of

ORDER: dict[str, Any] = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "title": "Name", "maxLength": 20},
        "count": {"type": "integer", "minimum": 1, "maximum": 100},
        "ok": {"type": "boolean"},
        "colour": {"type": "string", "enum": ["red", "green", "blue"]},
        "size": {
            "type": "string",
            "oneOf": [{"const": "s", "title": "Small"}, {"const": "l", "title": "Large"}],
        },
        "price": {"type": "number", "minimum": 0},
        "mail": {"type": "string", "format": "email"},
        "site": {"type": "string", "format": "uri"},
        "day": {"type": "string", "format": "date"},
        "at": {"type": "string", "format": "date-time"},
    },
    "required": ["name", "count", "ok", "colour"],
}
GOOD: dict[str, Any] = {"name": "Ada", "count": 3, "ok": False, "colour": "blue"}


def test_the_fields_are_read_in_order_with_their_kinds_and_choices() -> None:
    fields = form_fields(ORDER)
    assert [(f.name, f.kind, f.required) for f in fields[:5]] == [
        ("name", "string", True),
        ("count", "integer", True),
        ("ok", "boolean", True),
        ("colour", "enum", True),
        ("size", "enum", False),
    ]
    assert fields[3].choices == ("red", "green", "blue") and fields[4].choices == ("s", "l")
    assert fields[0].max_length == 20 and fields[5].max_length == MAX_STRING_CHARS


@pytest.mark.parametrize(
    "content",
    [
        GOOD,
        {**GOOD, "size": "l", "price": 2.5, "mail": "a@b.org", "site": "https://x.org/a"},
        {**GOOD, "day": "2026-11-29", "at": "2026-11-29T05:00:00Z", "price": 0},
    ],
)
def test_content_that_fits_is_kept_as_it_is(content: dict[str, Any]) -> None:
    assert check_content(ORDER, content) == content


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ({**GOOD, "count": "3"}, "field 'count': expected an integer, got str"),
        ({**GOOD, "count": 2.5}, "field 'count': expected an integer"),
        ({**GOOD, "count": True}, "field 'count': expected an integer, got bool"),
        ({**GOOD, "count": 0}, "field 'count': 0 is below the minimum 1"),
        ({**GOOD, "count": 101}, "field 'count': 101 is above the maximum 100"),
        ({**GOOD, "ok": "yes"}, "field 'ok': expected a boolean"),
        ({**GOOD, "colour": "pink"}, "field 'colour': 'pink' is not one of red, green, blue"),
        ({**GOOD, "name": 7}, "field 'name': expected a string"),
        ({**GOOD, "name": "x" * 21}, "field 'name': longer than 20"),
        ({**GOOD, "price": float("nan")}, "field 'price': not a finite number"),
        ({**GOOD, "mail": "nobody"}, "field 'mail': 'nobody' is not a valid email"),
        ({**GOOD, "site": "no scheme"}, "field 'site'"),
        ({**GOOD, "day": "29/11/2026"}, "field 'day'"),
        ({**GOOD, "extra": 1}, "field 'extra' is not in the form"),
        ({"name": "Ada", "count": 3, "ok": True}, "field 'colour' is required"),
        ([1], "not an object"),
    ],
)
def test_content_that_does_not_fit_is_refused_naming_the_field(content: Any, message: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        check_content(ORDER, content)
    assert message in caught.value.message


def test_content_is_bounded_in_size() -> None:
    schema = {"type": "object", "properties": {f"f{i}": {"type": "string"} for i in range(8)}}
    big = {f"f{i}": "x" * 4000 for i in range(8)}
    with pytest.raises(InvalidInput, match=f"larger than {MAX_CONTENT_BYTES} bytes"):
        check_content(schema, big)
    with pytest.raises(ValidationError, match=f"larger than {MAX_CONTENT_BYTES} bytes"):
        ApprovalResponse(request_id="r/elicitation-1", decision="approve_once", content=big)


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "array"},
        {"type": "object", "properties": {"a": {"type": "object"}}},
        {"type": "object", "properties": {"a": {"type": "string", "format": "regex"}}},
        {"type": "object", "properties": {"a": {"type": "string", "enum": [1, 2]}}},
        {"type": "object", "properties": {"a": {"type": "string"}}, "required": ["b"]},
        {"type": "object", "properties": {f"f{i}": {"type": "boolean"} for i in range(65)}},
    ],
)
def test_a_form_outside_the_mcp_restriction_is_refused(schema: dict[str, Any]) -> None:
    with pytest.raises(InvalidInput, match="form"):
        form_fields(schema)


def test_what_a_user_types_becomes_the_fields_typed_value() -> None:
    name, count, ok, colour, size, price = form_fields(ORDER)[:6]
    assert value_of(count, " 42 ") == 42 and value_of(price, "2.5") == 2.5
    assert value_of(ok, "Y") is True and value_of(ok, "no") is False
    assert value_of(colour, "2") == "green" and value_of(colour, "blue") == "blue"
    assert value_of(size, "1") == "s" and value_of(name, "Ada") == "Ada"
    for field, text, message in [
        (count, "three", "field 'count': 'three' is not an integer"),
        (count, "0", "below the minimum"),
        (ok, "maybe", "field 'ok': answer yes or no"),
        (colour, "4", "field 'colour': '4' is not one of"),
    ]:
        with pytest.raises(InvalidInput) as caught:
            value_of(field, text)
        assert message in caught.value.message


@given(
    st.dictionaries(
        st.text(max_size=5), st.one_of(st.integers(), st.text(max_size=5), st.booleans()), max_size=5
    )
)
def test_check_content_accepts_only_what_fits_and_raises_nothing_else(content: dict[str, Any]) -> None:
    try:
        kept = check_content(ORDER, content)
    except InvalidInput:
        return
    assert kept == content and set(ORDER["required"]) <= set(content)
