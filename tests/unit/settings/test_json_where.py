"""Where a key, a duplicate key or a byte is in a JSON text (``shared/json_where.py``)."""

from __future__ import annotations

import pytest

from jidocode.shared.json_where import byte_position, duplicate_key, key_path, key_positions, text_position

TEXT = '{\n  "permissions": {\n    "deny": ["Read(x)", "Bash"],\n    "ask": []\n  },\n  "llm": {"model": "m"}\n}\n'


def test_each_key_is_found_at_its_opening_quote() -> None:
    found = key_positions(TEXT)
    assert found[("permissions",)] == (2, 3)
    assert found[("permissions", "deny")] == (3, 5)
    assert found[("permissions", "deny", "[1]")] == (3, 25)
    assert found[("permissions", "ask")] == (4, 5)
    assert found[("llm", "model")] == (6, 11)


def test_a_duplicate_key_is_found_at_its_second_occurrence() -> None:
    assert duplicate_key('{"a": {"x": 1,\n  "x": 2}}') == (("a", "x"), (2, 3))
    assert duplicate_key(TEXT) is None


@pytest.mark.parametrize(
    ("key", "path"),
    [
        ("permissions.deny", ("permissions", "deny")),
        ("signal_bus.middleware[0]", ("signal_bus", "middleware", "[0]")),
        ("version", ("version",)),
    ],
)
def test_key_paths(key: str, path: tuple[str, ...]) -> None:
    assert key_path(key) == path


def test_positions_are_one_based_lines_and_columns() -> None:
    assert text_position("ab\ncd", 0) == (1, 1)
    assert text_position("ab\ncd", 4) == (2, 2)
    assert byte_position(b"\xc3\xa9\n\xff", 3) == (2, 1)


@pytest.mark.parametrize("text", ['{"a": ', '{"a": [1, 2', "[" * 50_000, '{"a" 1}'])
def test_a_text_that_cannot_be_walked_gives_what_was_found_and_never_raises(text: str) -> None:
    found = key_positions(text)
    assert all(isinstance(pos, tuple) for pos in found.values())
