"""The PRD schema: camelCase keys, validation naming the field, the committed JSON schema."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from pydantic import ValidationError

from jidocode.services.prd.model import (
    MAX_CRITERIA,
    MAX_STORIES,
    Prd,
    UserStory,
    json_schema,
    json_schema_text,
    story_state,
)

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
    with pytest.raises(ValidationError) as info:
        Prd.model_validate(raw)
    err = info.value.errors()[0]
    return ".".join(map(str, err["loc"])), err["msg"]


@pytest.mark.parametrize(
    ("raw", "where", "words"),
    [
        (doc(story("bad id")), "userStories.0.id", "pattern"),
        (doc(story("a"), story("a")), "", "more than once"),
        (doc(name="a.b"), "name", "pattern"),
        (doc(name=""), "name", "pattern"),
        (doc(story("a", passes=True, inProgress=True)), "userStories.0", "both"),
        (doc(story("a", inProgress=True), story("b", inProgress=True)), "", "at most one"),
        (doc(story("a", title="x" * 201)), "userStories.0.title", "200"),
        (doc(story("a", title="")), "userStories.0.title", "at least 1"),
        (doc(story("a", description="x" * 20_001)), "userStories.0.description", "20000"),
        (
            doc(story("a", acceptanceCriteria=["c"] * (MAX_CRITERIA + 1))),
            "userStories.0.acceptanceCriteria",
            "64",
        ),
        (doc(*[story(f"s{i}") for i in range(MAX_STORIES + 1)]), "userStories", "500"),
        (doc(story("a", pases=True)), "userStories.0.pases", "Extra"),
        (doc(extra=1), "extra", "Extra"),
        (doc(version=2), "", "version must be 1"),
        (doc(story("a", priority=-1)), "userStories.0.priority", "greater than or equal"),
        (doc(story("a", attempts=-1)), "userStories.0.attempts", "greater than or equal"),
    ],
)
def test_invalid_documents_name_the_field(raw: dict[str, Any], where: str, words: str) -> None:
    loc, msg = _error(raw)
    assert loc == where
    assert words in msg


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
