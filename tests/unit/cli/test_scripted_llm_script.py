"""`jidocode dev scripted-llm --script`: a bad file is a clear error naming the problem, never a traceback."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from jidocode.cli.main import app

runner = CliRunner()


@pytest.mark.parametrize(
    ("content", "said"),
    [
        ("not json", "is not JSON"),
        ('{"kind": "text"}', "must hold a JSON list of replies"),
        ('[{"kind": "text", "text": "ok"}, {"kind": "bogus"}]', "reply 1: kind"),
    ],
)
def test_a_bad_script_names_the_problem(tmp_path: Path, content: str, said: str) -> None:
    script = tmp_path / "replies.json"
    script.write_text(content)
    result = runner.invoke(app, ["dev", "scripted-llm", "--script", str(script)])
    assert result.exit_code == 2
    assert said in " ".join(result.output.split())
    assert "Traceback" not in result.output


def test_a_missing_script_names_the_file(tmp_path: Path) -> None:
    result = runner.invoke(app, ["dev", "scripted-llm", "--script", str(tmp_path / "nope.json")])
    assert result.exit_code == 2
    assert "cannot read" in " ".join(result.output.split())


def test_conversations_delete_asks_first() -> None:
    # declining the confirmation ends it before anything connects
    result = runner.invoke(app, ["conversations", "delete", "/tmp", "c1"], input="n\n")
    assert result.exit_code == 1
    assert "delete conversation c1 and its whole history?" in result.output
