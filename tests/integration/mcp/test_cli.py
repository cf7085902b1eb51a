"""`jidocode mcp` with no system running: one line on stderr naming `jidocode up`, nothing on stdout."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
from typer.testing import CliRunner

from jidocode.cli.main import app


def test_no_system_fails_at_once_naming_jidocode_up(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket() as free:  # a port nobody listens on
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    monkeypatch.setenv("NATS_URL", f"nats://127.0.0.1:{port}")
    monkeypatch.setenv("JIDO_DATA_HOME", str(tmp_path / "data"))
    result = CliRunner().invoke(app, ["mcp", str(tmp_path)])
    assert result.exit_code == 1
    assert result.stdout == ""  # an MCP client reads stdout as protocol
    assert "jidocode up" in " ".join(result.stderr.split())
