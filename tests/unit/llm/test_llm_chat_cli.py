"""Pure helpers of `jidocode chat` and the client."""

from __future__ import annotations

import json

from jidocode.cli.chat import _outcome, _preview, envelope_json
from jidocode.client._client import _decision
from jidocode.shared.envelope import Envelope


def test_preview_is_one_short_line() -> None:
    text = _preview({"path": "a.py", "content": "x\n" * 100, "n": 3})
    assert "\n" not in text
    assert text.startswith("path=a.py, content=x x x")
    assert "…" in text and text.endswith("n=3")


def test_outcomes() -> None:
    assert _outcome({"data": {"exit_code": 0, "stdout": ""}}) == "exit 0"
    assert _outcome({"data": {"start_line": 1, "end_line": 9, "total_lines": 9}}) == "lines 1-9 of 9"
    assert _outcome({"data": {"bytes": 5, "created": True}}) == "5 bytes written (new file)"
    assert _outcome({"data": {"entries": [1, 2], "truncated": True}}) == "2+ entries"
    assert _outcome({"data": "a\nb"}) == "2 lines"
    assert _outcome({}) == "ok"


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
