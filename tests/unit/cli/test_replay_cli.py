"""``jidocode replay`` and ``jidocode conversations export`` as commands: wired, and a bad
recording is refused before anything starts (exit 2, naming the line)."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from jidocode.cli.main import app


def test_replay_refuses_a_file_that_is_not_a_recording(tmp_path: Path) -> None:
    path = tmp_path / "notes.jsonl"
    path.write_text('{"kind": "header", "format": "something-else", "version": 1}\n')
    result = CliRunner().invoke(app, ["replay", str(path)])
    assert result.exit_code == 2, result.output
    said = "".join(result.output.split())  # the console wraps long lines, even inside the path
    assert "notes.jsonl:1:notaconversationrecording(format'something-else')" in said


def test_the_commands_are_there() -> None:
    runner = CliRunner()
    replay = runner.invoke(app, ["replay", "--help"])
    assert replay.exit_code == 0 and "--project" in replay.output
    export = runner.invoke(app, ["conversations", "export", "--help"])
    assert export.exit_code == 0 and "--output" in export.output


def test_a_recording_line_over_the_limit_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from jidocode.cli import recording
    from jidocode.shared.errors import InvalidInput

    monkeypatch.setattr(recording, "MAX_LINE_BYTES", 100)
    path = tmp_path / "big.jsonl"
    header = (
        '{"kind": "header", "format": "jidocode.conversation-recording", "version": 1, '
        '"project_id": "p", "conversation_id": "c", "entries": 1, "answers": 0}'
    )
    path.write_text(header + "\n")
    with pytest.raises(InvalidInput, match=r"big\.jsonl:1: a line of \d+ characters is over 100"):
        recording.read_recording(path)
