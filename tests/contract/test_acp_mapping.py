"""What the conversation's tool events and asks are in ACP terms (``cli/acp_agent/mapping.py``):
kinds, titles, locations and diffs that never name a path outside the project, permission
answers as decisions, the project's commands as ACP commands."""

from __future__ import annotations

import pytest
from acp.schema import AllowedOutcome, DeniedOutcome, FileEditToolCallContent

from jidocode.cli.acp_agent.mapping import (
    MAX_TOOL_TEXT,
    available_commands,
    decision_of_outcome,
    file_uri_path,
    inside_root,
    permission_tool_call,
    tool_call_end,
    tool_call_start,
    tool_kind,
)
from jidocode.client import ApprovalRequest

ROOT = "/home/me/proj"


@pytest.mark.parametrize(
    ("name", "kind"),
    [
        ("read_file", "read"),
        ("list_dir", "read"),
        ("grep", "search"),
        ("glob", "search"),
        ("edit_file", "edit"),
        ("write_file", "edit"),
        ("bash", "execute"),
        ("web_fetch", "fetch"),
        ("mcp__git__status", "other"),
        ("task", "other"),
    ],
)
def test_the_kind_comes_from_the_tools_declaration(name: str, kind: str) -> None:
    assert tool_kind(name) == kind


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("src/a.py", f"{ROOT}/src/a.py"),
        (".", ROOT),
        (f"{ROOT}/README.md", f"{ROOT}/README.md"),
        ("../other/x", None),
        ("src/../../etc/passwd", None),
        ("/etc/passwd", None),
        ("/home/me/proj-other/x", None),
        ("a\0b", None),
        ("", None),
        (3, None),
    ],
)
def test_a_path_is_named_only_inside_the_root(path: object, expected: str | None) -> None:
    assert inside_root(ROOT, path) == expected


def test_a_read_names_its_file_and_line() -> None:
    start = tool_call_start(ROOT, "req-1", "read_file", {"path": "src/a.py", "offset": 40})
    assert (start.tool_call_id, start.kind, start.status, start.title) == (
        "req-1",
        "read",
        "pending",
        "read_file src/a.py",
    )
    assert [(loc.path, loc.line) for loc in start.locations or []] == [(f"{ROOT}/src/a.py", 40)]
    assert start.content is None
    listing = tool_call_start(ROOT, "req-2", "list_dir", {})
    assert [loc.path for loc in listing.locations or []] == [ROOT]  # the path a tool takes by default


def test_an_edit_carries_its_diff_and_a_path_outside_carries_none() -> None:
    edit = tool_call_start(ROOT, "r", "edit_file", {"path": "src/a.py", "old_string": "a", "new_string": "b"})
    (diff,) = edit.content or []
    assert isinstance(diff, FileEditToolCallContent)
    assert (diff.path, diff.old_text, diff.new_text) == (f"{ROOT}/src/a.py", "a", "b")
    write = tool_call_start(ROOT, "r", "write_file", {"path": "new.txt", "content": "hi\n"})
    (diff,) = write.content or []
    assert isinstance(diff, FileEditToolCallContent) and diff.old_text is None and diff.new_text == "hi\n"
    outside = tool_call_start(ROOT, "r", "write_file", {"path": "../../x", "content": "hi\n"})
    assert outside.content is None and outside.locations is None


def test_a_title_carries_no_control_characters() -> None:
    start = tool_call_start(ROOT, "r", "bash", {"command": "echo \x1b[31mred\x1b[0m\nrm"})
    assert "\x1b" not in start.title and "\n" not in start.title and start.kind == "execute"


def test_the_permission_request_is_about_the_same_call() -> None:
    request = ApprovalRequest(
        request_id="req-9", tool="write_file", args={"path": "ask/x.txt", "content": "after\n"}
    )
    asked = permission_tool_call(ROOT, request)
    assert asked.tool_call_id == "req-9" and asked.kind == "edit"
    assert [loc.path for loc in asked.locations or []] == [f"{ROOT}/ask/x.txt"]


@pytest.mark.parametrize(
    ("outcome", "decision"),
    [
        (AllowedOutcome(outcome="selected", option_id="allow_once"), "approve_once"),
        (AllowedOutcome(outcome="selected", option_id="allow_always"), "approve_session"),
        (AllowedOutcome(outcome="selected", option_id="reject_once"), "deny"),
        (AllowedOutcome(outcome="selected", option_id="something-else"), "deny"),
        (DeniedOutcome(outcome="cancelled"), "deny"),
    ],
)
def test_an_answer_is_a_decision(outcome: AllowedOutcome | DeniedOutcome, decision: str) -> None:
    assert decision_of_outcome(outcome) == decision


def test_an_ended_call_shows_its_result_or_its_error() -> None:
    done = tool_call_end("r", "read_file", data={"content": "x" * (MAX_TOOL_TEXT + 10)})
    assert done.status == "completed"
    (shown,) = done.content or []
    assert shown.content.text.endswith("…") and len(shown.content.text) == MAX_TOOL_TEXT + 2
    edited = tool_call_end("r", "edit_file", data={"replacements": 1})
    assert edited.content is None  # the editor keeps the diff it was shown
    failed = tool_call_end("r", "bash", error="permission_denied: no rule allows rm")
    assert failed.status == "failed"
    assert (
        failed.content is not None
        and failed.content[0].content.text == "permission_denied: no rule allows rm"
    )


def test_commands_become_acp_commands() -> None:
    commands = available_commands(
        [
            {"name": "review", "description": "Review a file", "argument_hint": "<file>"},
            {"name": "plan", "description": "", "arguments": [{"name": "goal"}, {"name": "scope"}]},
            {"name": "", "description": "no name"},
        ]
    )
    assert [(c.name, c.description) for c in commands] == [("review", "Review a file"), ("plan", "/plan")]
    hints = [c.input.root.hint if c.input is not None else None for c in commands]
    assert hints == ["<file>", "<goal> <scope>"]


@pytest.mark.parametrize(
    ("uri", "path"),
    [
        ("file:///home/me/proj/a%20b.py", "/home/me/proj/a b.py"),
        ("file://localhost/x", "/x"),
        ("file://elsewhere/x", None),
        ("https://example.invalid/x", None),
    ],
)
def test_only_local_file_uris_are_paths(uri: str, path: str | None) -> None:
    assert file_uri_path(uri) == path
