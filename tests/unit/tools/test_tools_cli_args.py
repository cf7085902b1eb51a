"""`jidocode tools run --args`: bad JSON is refused before anything connects."""

from __future__ import annotations

from typer.testing import CliRunner

from jidocode.cli.tools import app


def test_args_must_be_a_json_object() -> None:
    runner = CliRunner()
    for bad in ("[1]", "{nope", "42"):
        result = runner.invoke(app, ["run", "/nonexistent", "read_file", "--args", bad])
        assert result.exit_code == 2, result.output
