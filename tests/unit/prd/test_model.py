"""The PRD schema: camelCase keys, validation naming the field, the committed JSON schema."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from jidocode.services.prd.model import (
    MAX_ATTEMPTS,
    MAX_BRANCH_CHARS,
    MAX_CRITERIA,
    MAX_CRITERION_CHARS,
    MAX_DESCRIPTION_CHARS,
    MAX_NOTES_CHARS,
    MAX_PRD_DESCRIPTION_CHARS,
    MAX_PRIORITY,
    MAX_STORIES,
    MAX_TITLE_CHARS,
    Prd,
    UserStory,
    clean_text,
    json_schema,
    json_schema_text,
    parse_prd_data,
    story_state,
)
from jidocode.shared.errors import InvalidInput

from .conftest import doc, story

SCHEMA_FILE = Path(__file__).resolve().parents[3] / "docs" / "prd.schema.json"


def test_round_trip_uses_the_seed_keys() -> None:
    raw = doc(story("US-001", acceptanceCriteria=["a"], inProgress=True), branchName="prd/auth")
    prd = Prd.model_validate(raw)
    out = prd.to_json_dict()
    assert out["branchName"] == "prd/auth"
    assert out["userStories"][0]["inProgress"] is True
    assert out["userStories"][0]["acceptanceCriteria"] == ["a"]
    assert set(out["userStories"][0]) == {
        "id", "title", "description", "acceptanceCriteria", "priority", "passes", "inProgress", "notes", "attempts",
    }  # fmt: skip
    assert json.loads(prd.model_dump_json()) == out
    assert Prd.model_validate(out) == prd


def test_python_names_also_build_it() -> None:
    prd = Prd(name="auth", user_stories=[UserStory(id="a", title="t", in_progress=True)])
    assert prd.user_stories[0].in_progress


def _error(raw: dict[str, Any]) -> tuple[str, str]:
    with pytest.raises(InvalidInput) as info:
        parse_prd_data(raw, source="f.json")
    assert info.value.message.startswith(f"f.json: {info.value.details['field']}: ")
    return info.value.details["field"], info.value.message


@pytest.mark.parametrize(
    ("raw", "where", "words"),
    [
        (doc(story("bad id")), "userStories[0].id", "pattern"),
        (
            doc(story("a"), story("b"), story("a")),
            "userStories[2].id",
            "'a' appears more than once (also userStories[0])",
        ),
        (doc(name="a.b"), "name", "pattern"),
        (doc(name=""), "name", "pattern"),
        (doc(story("a", passes=True, inProgress=True)), "userStories[0].inProgress", "both"),
        (
            doc(story("a", inProgress=True), story("b", inProgress=True)),
            "userStories[1].inProgress",
            "at most one",
        ),
        (doc(story("a", title="x" * 201)), "userStories[0].title", "200"),
        (doc(story("a", title="")), "userStories[0].title", "at least 1"),
        (doc(story("a", description="x" * 20_001)), "userStories[0].description", "20000"),
        (doc(description="x" * 100_001), "description", "100000"),
        (
            doc(story("a", acceptanceCriteria=["c"] * (MAX_CRITERIA + 1))),
            "userStories[0].acceptanceCriteria",
            "64",
        ),
        (
            doc(story("a", acceptanceCriteria=["ok", "c" * 2001])),
            "userStories[0].acceptanceCriteria[1]",
            "2000",
        ),
        (doc(*[story(f"s{i}") for i in range(MAX_STORIES + 1)]), "userStories", "500"),
        (doc(story("a", pases=True)), "userStories[0].pases", "Extra"),
        (doc(story("a", in_progress=True)), "userStories[0].in_progress", "Extra"),
        (doc(extra=1), "extra", "Extra"),
        (doc(version=2), "version", "version must be 1"),
        (doc(version="1"), "version", "version must be 1"),
        (doc(version=True), "version", "version must be 1"),
        (doc(story("a", priority=-1)), "userStories[0].priority", "greater than or equal"),
        (doc(story("a", attempts=-1)), "userStories[0].attempts", "greater than or equal"),
        (doc(branchName="-f"), "branchName", "branch name"),
        (doc(branchName="a..b"), "branchName", "branch name"),
        (doc(branchName="a b"), "branchName", "branch name"),
        (doc(branchName="x.lock"), "branchName", "branch name"),
        (doc(branchName="a/.b"), "branchName", "branch name"),
        (doc(branchName="HEAD@{1}"), "branchName", "branch name"),
        (doc(title="a\nb"), "title", "one line"),
        (doc(story("a", title="x\x1b[2J")), "userStories[0].title", "one line"),
        (doc(story("a", description="x\x00y")), "userStories[0].description", "control character"),
        (
            doc(story("a", acceptanceCriteria=["\x1b]0;pwned\x07"])),
            "userStories[0].acceptanceCriteria[0]",
            "control",
        ),
        (doc(story("a", notes="\x07")), "userStories[0].notes", "control character"),
        (doc(description="\x7f"), "description", "control character"),
    ],
)
def test_invalid_documents_name_the_field(raw: dict[str, Any], where: str, words: str) -> None:
    field, message = _error(raw)
    assert field == where
    assert words in message


def test_many_problems_are_counted_and_listed() -> None:
    with pytest.raises(InvalidInput) as info:
        parse_prd_data(doc(story("a", title=""), story("b b")), source="f.json")
    assert "(and 1 more)" in info.value.message
    assert [e["field"] for e in info.value.details["errors"]] == ["userStories[0].title", "userStories[1].id"]


def test_not_an_object() -> None:
    with pytest.raises(InvalidInput, match="top level must be a JSON object"):
        parse_prd_data([], source="f.json")


def test_good_branch_names() -> None:
    for name in ("prd/auth", "feature/US-1_x", "v1.2"):
        assert Prd.model_validate(doc(branchName=name)).branch_name == name


def test_frozen() -> None:
    prd = Prd.model_validate(doc(story("a")))
    with pytest.raises(ValidationError):
        prd.user_stories[0].passes = True  # type: ignore[misc]


def test_story_state() -> None:
    assert story_state(UserStory(id="a", title="t")) == "pending"
    assert story_state(UserStory(id="a", title="t", in_progress=True)) == "in_progress"
    assert story_state(UserStory(id="a", title="t", passes=True)) == "passed"


def test_schema_accepts_what_the_model_accepts_and_refuses_typos() -> None:
    schema = json_schema()
    good = Prd.model_validate(doc(story("US-001", acceptanceCriteria=["x"]))).to_json_dict()
    jsonschema.validate(good, schema)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({**good, "userStories": [{**good["userStories"][0], "pases": True}]}, schema)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({**good, "name": "a b"}, schema)


def test_committed_schema_is_fresh() -> None:
    assert SCHEMA_FILE.read_text() == json_schema_text(), (
        "docs/prd.schema.json is stale: .venv/bin/python -m jidocode.services.prd.model > docs/prd.schema.json"
    )


LIMITS = [
    ("name", lambda n: doc(name="a" * n), 64),
    ("title", lambda n: doc(title="a" * n), MAX_TITLE_CHARS),
    ("description", lambda n: doc(description="a" * n), MAX_PRD_DESCRIPTION_CHARS),
    ("branchName", lambda n: doc(branchName="a" * n), MAX_BRANCH_CHARS),
    ("userStories", lambda n: doc(*[story(f"s{i}") for i in range(n)]), MAX_STORIES),
    ("userStories[0].id", lambda n: doc(story("a" * n)), 64),
    ("userStories[0].title", lambda n: doc(story("a", title="a" * n)), MAX_TITLE_CHARS),
    ("userStories[0].description", lambda n: doc(story("a", description="a" * n)), MAX_DESCRIPTION_CHARS),
    ("userStories[0].notes", lambda n: doc(story("a", notes="a" * n)), MAX_NOTES_CHARS),
    (
        "userStories[0].acceptanceCriteria",
        lambda n: doc(story("a", acceptanceCriteria=["c"] * n)),
        MAX_CRITERIA,
    ),
    (
        "userStories[0].acceptanceCriteria[0]",
        lambda n: doc(story("a", acceptanceCriteria=["c" * n])),
        MAX_CRITERION_CHARS,
    ),
    ("userStories[0].priority", lambda n: doc(story("a", priority=n)), MAX_PRIORITY),
    ("userStories[0].attempts", lambda n: doc(story("a", attempts=n)), MAX_ATTEMPTS),
]


@pytest.mark.parametrize(("field", "build", "limit"), LIMITS, ids=[f for f, _, _ in LIMITS])
def test_every_limit_holds_at_its_value_and_refuses_one_more(
    field: str, build: Callable[[int], dict[str, Any]], limit: int
) -> None:
    parse_prd_data(build(limit))
    with pytest.raises(InvalidInput) as info:
        parse_prd_data(build(limit + 1))
    assert info.value.details["field"] == field


def test_multi_line_text_keeps_tabs_and_newlines() -> None:
    prd = parse_prd_data(doc(story("a", description="one\n\ttwo\r\n", acceptanceCriteria=["x\ny"])))
    assert prd.user_stories[0].description == "one\n\ttwo\r\n"


@pytest.mark.parametrize(
    ("raw", "clean"),
    [
        ("\x1b[31mFAILED\x1b[0m test_x", "FAILED test_x"),
        ("a\r\nb\rc", "a\nb\nc"),
        ("nul\x00 bell\x07 tab\t", "nul bell tab\t"),
        ("\x1b]0;title\x07after", "after"),
        ("plain é ✓", "plain é ✓"),
    ],
)
def test_clean_text(raw: str, clean: str) -> None:
    assert clean_text(raw) == clean
    parse_prd_data(doc(story("a", notes=clean_text(raw))))


@settings(max_examples=50)
@given(st.text())
def test_clean_text_always_fits_a_text_field(raw: str) -> None:
    parse_prd_data(doc(story("a", description=clean_text(raw)[:20_000])))
