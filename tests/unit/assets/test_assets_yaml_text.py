"""The safe YAML loader and the text helpers: limits, bad input, never a crash."""

from __future__ import annotations

import contextlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jidocode.services.asset_loader.safe_yaml import YamlError, YamlLimitError, YamlLimits, load_yaml
from jidocode.services.asset_loader.text import (
    MAX_ASSET_BYTES,
    decode_text,
    is_slug,
    parse_tool_list,
    split_frontmatter,
)

BOMB = """a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]
b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]
c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]
d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]
e: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]
"""


def test_core_types_and_timestamps_stay_strings() -> None:
    assert load_yaml("a: 1\nb: [1, 2]\nd: 2024-01-01\ne: 1.5\nf: true\ng: ~\nh: !!str 12") == {
        "a": 1,
        "b": [1, 2],
        "d": "2024-01-01",
        "e": 1.5,
        "f": True,
        "g": None,
        "h": "12",
    }


def test_merge_keys() -> None:
    assert load_yaml("base: &b {x: 1, y: 2}\nm:\n  <<: *b\n  y: 3") == {
        "base": {"x": 1, "y": 2},
        "m": {"x": 1, "y": 3},
    }


def test_empty_is_none() -> None:
    assert load_yaml("") is None


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("a: 1\na: 2", "duplicate key"),
        ("? [1]\n: 2", "scalar"),
        ("!!python/object/apply:os.system ['id']", "unsupported tag"),
        ("a: !!binary aGk=", "unsupported tag"),
        ("a: *nope", "undefined alias"),
        ("a\n---\nb", "more than one"),
        ("a: [1, 2", "invalid YAML"),
        ("a: \x00", "NUL"),
    ],
)
def test_refused(text: str, fragment: str) -> None:
    with pytest.raises(YamlError, match=fragment):
        load_yaml(text)


def test_billion_laughs_refused() -> None:
    with pytest.raises(YamlLimitError, match="alias expansion"):
        load_yaml(BOMB)


@pytest.mark.parametrize(
    ("limits", "text", "fragment"),
    [
        (YamlLimits(max_depth=3), "[[[[1]]]]", "deeper"),
        (YamlLimits(max_anchors=1), "a: &x 1\nb: &y 2", "anchors"),
        (YamlLimits(max_aliases=1), "a: &x 1\nb: *x\nc: *x", "aliases"),
        (YamlLimits(max_nodes=3), "[1, 2, 3, 4]", "nodes"),
        (YamlLimits(max_chars=5), "abcdef", "longer"),
    ],
)
def test_each_limit(limits: YamlLimits, text: str, fragment: str) -> None:
    with pytest.raises(YamlLimitError, match=fragment):
        load_yaml(text, limits=limits)


def test_default_depth_limit() -> None:
    with pytest.raises(YamlLimitError):
        load_yaml("[" * 10_000 + "]" * 10_000)


def test_negative_limit_rejected() -> None:
    with pytest.raises(ValueError):
        YamlLimits(max_depth=-1)


@given(st.text(max_size=300))
@settings(max_examples=300, deadline=None)
def test_never_crashes_on_text(text: str) -> None:
    with contextlib.suppress(YamlError):
        load_yaml(text)


_yamlish = st.lists(
    st.sampled_from(
        [
            "a",
            ":",
            " ",
            "\n",
            "-",
            "&x",
            "*x",
            "[",
            "]",
            "{",
            "}",
            "<<",
            "!!str",
            "'",
            '"',
            "1",
            "#",
            "?",
            ",",
        ]
    ),
    max_size=60,
).map("".join)


@given(_yamlish)
@settings(max_examples=400, deadline=None)
def test_never_crashes_on_yamlish(text: str) -> None:
    with contextlib.suppress(YamlError):
        load_yaml(text)


def test_decode_text() -> None:
    assert decode_text(b"hi", "f") == ("hi", [])
    text, diags = decode_text(b"\xef\xbb\xbfhi", "f")
    assert text == "hi" and diags[0].severity == "warning" and "byte order mark" in diags[0].problem
    text, diags = decode_text(b"\xc3\x28", "f")
    assert text is None and "UTF-8" in diags[0].problem and diags[0].file == "f"
    text, diags = decode_text(b"a\x00b", "f")
    assert text is None and "NUL" in diags[0].problem
    text, diags = decode_text(b"x" * (MAX_ASSET_BYTES + 1), "f")
    assert text is None and "larger" in diags[0].problem


def test_split_frontmatter() -> None:
    fm, body, diags = split_frontmatter("---\nname: x\n---\n\n# Body\n", "f")
    assert fm == {"name": "x"} and body == "# Body\n" and diags == []
    assert split_frontmatter("# no fm", "f") == ({}, "# no fm", [])
    fm, _, diags = split_frontmatter("---\nname: x\n", "f")
    assert fm is None and "not closed" in diags[0].problem
    fm, _, diags = split_frontmatter("---\n- 1\n---\n", "f")
    assert fm is None and "mapping" in diags[0].problem
    fm, _, diags = split_frontmatter("---\n1: x\n---\n", "f")
    assert fm is None and "non-string key" in diags[0].problem
    fm, _, diags = split_frontmatter("---\r\nname: x\r\n---\r\nbody", "f")
    assert fm == {"name": "x"}
    fm, body, _ = split_frontmatter("---\n---\nbody", "f")
    assert fm == {} and body == "body"


def test_slug() -> None:
    assert is_slug("pdf-processor") and is_slug("a1")
    for bad in ("", "Pdf", "a--b", "-a", "a-", "a_b", "a" * 65, "a b"):
        assert not is_slug(bad)


def test_parse_tool_list() -> None:
    assert parse_tool_list("Read, Write, Bash(python:*)", "f", "k") == (
        ["Read", "Write", "Bash(python:*)"],
        [],
    )
    assert parse_tool_list("Bash(git status:*) Read", "f", "k")[0] == ["Bash(git status:*)", "Read"]
    assert parse_tool_list(["Read", " Grep "], "f", "k")[0] == ["Read", "Grep"]
    assert parse_tool_list(None, "f", "k") == ([], [])
    assert parse_tool_list(3, "f", "k")[1][0].key == "k"
    assert parse_tool_list([1], "f", "k")[1]
    assert parse_tool_list("Bash(x", "f", "k")[1][0].severity == "warning"
