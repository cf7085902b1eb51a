"""Ralph's prd.json to a PRD and back (pure): the round trip keeps every field Ralph has, and a
document that does not fit is an error naming the field as Ralph spells it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from jidocode.cli.main import app
from jidocode.cli.prd_source import read_source
from jidocode.services.prd.ralph import from_ralph, is_ralph, name_of, to_ralph
from jidocode.shared.errors import InvalidInput

RALPH: dict[str, Any] = {
    "project": "MyApp",
    "branchName": "ralph/task-priority",
    "description": "Task Priority System - Add priority levels to tasks",
    "userStories": [
        {
            "id": "US-001",
            "title": "Add priority field to database",
            "description": "As a developer, I need to store task priority so it persists.",
            "acceptanceCriteria": ["Add priority column", "Typecheck passes"],
            "priority": 1,
            "passes": True,
            "notes": "done in one go",
        },
        {
            "id": "US-002",
            "title": "Display priority indicator",
            "description": "As a user, I want to see task priority at a glance.",
            "acceptanceCriteria": ["Each task card shows a badge"],
            "priority": 2,
            "passes": False,
            "notes": "",
        },
    ],
}


def test_a_ralph_document_becomes_a_prd_and_comes_back_the_same() -> None:
    prd = from_ralph(RALPH)
    assert prd.name == "task-priority" and prd.title == "MyApp" and prd.branch_name == "ralph/task-priority"
    assert [(s.id, s.passes, s.priority) for s in prd.user_stories] == [
        ("US-001", True, 1),
        ("US-002", False, 2),
    ]
    assert prd.user_stories[0].notes == "done in one go"
    assert to_ralph(prd) == RALPH


_text = st.text(st.characters(blacklist_categories=("Cc", "Cs")), max_size=40)
_line = _text.filter(lambda t: t.strip() == t and bool(t))


@st.composite
def ralph_documents(draw: st.DrawFn) -> dict[str, Any]:
    ids = draw(st.lists(st.from_regex(r"[A-Za-z0-9_.\-]{1,12}", fullmatch=True), max_size=6, unique=True))
    stories = [
        {
            "id": sid,
            "title": draw(_line),
            "description": draw(_text),
            "acceptanceCriteria": draw(st.lists(_text, max_size=4)),
            "priority": draw(st.integers(0, 1_000_000)),
            "passes": draw(st.booleans()),
            "notes": draw(_text),
        }
        for sid in ids
    ]
    branch = draw(st.sampled_from(["", "ralph/x", "feature/a-b", "main"]))
    return {"project": draw(_line), "branchName": branch, "description": draw(_text), "userStories": stories}


@settings(max_examples=60, deadline=None)
@given(ralph_documents())
def test_the_round_trip_keeps_every_ralph_field(doc: dict[str, Any]) -> None:
    assert is_ralph(doc)
    assert to_ralph(from_ralph(doc, name="prd")) == doc


def test_names_come_from_the_branch_else_the_project() -> None:
    assert name_of({"branchName": "ralph/Task Priority!"}) == "Task-Priority"
    assert name_of({"project": "My App"}) == "My-App"
    with pytest.raises(InvalidInput, match="neither a branchName nor a project"):
        name_of({"branchName": "///", "project": ""})


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"userStories": "none"}, "userStories: must be a list of stories"),
        ({"owner": "x"}, "owner: not a key of a Ralph document"),
        ({"project": "two\nlines"}, "Ralph prd.json: project: must be one line"),
        ({"userStories": [{"id": "US-1"}]}, "userStories[0].title: Field required"),
        ({"userStories": [{"id": "US-1", "title": "t", "done": True}]}, "userStories[0].done: not a key"),
        (
            {"userStories": [{"id": "US-1", "title": "t", "acceptanceCriteria": "one"}]},
            "userStories[0].acceptanceCriteria",
        ),
    ],
)
def test_a_document_that_does_not_fit_names_the_field(change: dict[str, Any], message: str) -> None:
    with pytest.raises(InvalidInput, match=message.replace("[", r"\[").replace("]", r"\]")):
        from_ralph({**RALPH, **change})


def test_prd_new_from_reads_either_format(tmp_path: Path) -> None:
    ralph = tmp_path / "prd.json"
    ralph.write_text(json.dumps(RALPH))
    source = read_source(str(ralph))
    assert (source.name, source.title, source.branch_name) == (
        "task-priority",
        "MyApp",
        "ralph/task-priority",
    )
    first = source.stories[0]
    assert (first.id, first.passes, first.notes) == ("US-001", True, "done in one go")
    plain = tmp_path / "stories.json"
    plain.write_text(json.dumps([{"title": "A"}]))
    assert [s.title for s in read_source(str(plain)).stories] == ["A"] and read_source(str(plain)).name == ""
    ralph.write_text(json.dumps({**RALPH, "userStories": [{"title": "no id"}]}))
    with pytest.raises(InvalidInput, match=r"prd.json: Ralph prd.json: userStories\[0\].id"):
        read_source(str(ralph))


def test_prd_import_refuses_a_plain_stories_list_before_connecting(tmp_path: Path) -> None:
    plain = tmp_path / "stories.json"
    plain.write_text(json.dumps([{"title": "A"}]))
    result = CliRunner().invoke(
        app,
        ["prd", "import", str(tmp_path), str(plain), "--name", "x"],
        env={"NATS_URL": "nats://127.0.0.1:1"},  # a connection attempt would fail differently
    )
    assert result.exit_code == 2, result.output
    assert "is not a Ralph prd.json (an object with userStories)" in " ".join(result.output.split())
