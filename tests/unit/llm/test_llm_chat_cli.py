"""Pure helpers of `jidocode chat` and the client."""

from __future__ import annotations

import json

import pytest

from jidocode.cli.chat import _Screen
from jidocode.cli.chat_lines import envelope_json, outcome, preview
from jidocode.client._callbacks import decision_of as _decision
from jidocode.shared.envelope import Envelope
from jidocode.shared.events.conversation import ToolCallCompleted, ToolCallFailed, ToolCallRequested


def test_preview_is_one_short_line() -> None:
    text = preview({"path": "a.py", "content": "x\n" * 100, "n": 3})
    assert "\n" not in text
    assert text.startswith("path=a.py, content=x x x")
    assert "…" in text and text.endswith("n=3")


def test_outcomes() -> None:
    assert outcome({"exit_code": 0, "stdout": ""}) == "exit 0"
    assert outcome({"start_line": 1, "end_line": 9, "total_lines": 9}) == "lines 1-9 of 9"
    assert outcome({"bytes": 5, "created": True}) == "5 bytes written (new file)"
    assert outcome({"entries": [1, 2], "truncated": True}) == "2+ entries"
    assert outcome("a\nb") == "2 lines"
    assert outcome(None) == "ok"


def test_envelope_json_line() -> None:
    env = Envelope(id="1", source="s", type="conversation.assistant.delta", data={"text": "hi"})
    line = json.loads(envelope_json(env))
    assert line["type"] == "conversation.assistant.delta" and line["data"] == {"text": "hi"}


def test_approval_answers() -> None:
    assert _decision(True) == "approve_once"
    assert _decision("approve_session") == "approve_session"
    assert _decision(False) == "deny"
    assert _decision(None) == "deny"
    assert _decision("yes please") == "deny"


async def test_screen_shows_tool_calls_from_catalogue_events(capsys: pytest.CaptureFixture[str]) -> None:
    screen = _Screen(as_json=False, approve="ask", interactive=False)
    events = [
        ToolCallRequested(call_id="c", name="read_file", args={"path": "a.py"}, llm_request_id="r"),
        ToolCallCompleted(request_id="t", call_id="c", name="read_file", data={"bytes": 3, "created": False}),
        ToolCallFailed(request_id="t", call_id="c", name="bash", error_type="denied", message="not allowed"),
    ]
    for event in events:
        await screen.event(Envelope.new(event, source="test"))
    # an event of a type this version does not know shows nothing (and does not fail)
    await screen.event(Envelope(id="x", source="s", type="conversation.from_the_future", data={}))
    lines = capsys.readouterr().out.splitlines()
    assert lines == [
        "⏺ read_file(path=a.py)",
        "  ✓ read_file: 3 bytes written",
        "  ✗ bash: denied: not allowed",
    ]
