"""`jidocode mcp-servers login|logout`: what may be logged in to, refused before any request."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from jidocode.cli.main import app
from jidocode.services.tool_runner.mcp.approvals import approve_server
from jidocode.shared.trust import trust_project


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home, root = tmp_path / "home", tmp_path / "proj"
    home.mkdir()
    root.mkdir()
    monkeypatch.setenv("JIDO_CODE_HOME", str(home))
    monkeypatch.setenv("JIDO_DATA_HOME", str(tmp_path / "data"))
    servers = {
        "docs": {"type": "http", "url": "http://127.0.0.1:9/mcp"},
        "local": {"command": "/usr/bin/true"},
    }
    (root / ".mcp.json").write_text(json.dumps({"mcpServers": servers}))
    return root


def _run(*argv: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, ["mcp-servers", *argv])
    return result.exit_code, " ".join((result.stdout + result.stderr).split())


def test_an_untrusted_or_unapproved_projects_server_is_not_logged_in_to(project: Path) -> None:
    code, out = _run("login", str(project), "docs", "--no-browser", "--timeout", "5")
    assert code == 2 and "is untrusted" in out
    trust_project(project, home=project.parent / "home")
    code, out = _run("login", str(project), "docs", "--no-browser", "--timeout", "5")
    assert code == 2 and "awaiting approval" in out and "jidocode mcp-servers approve" in out


def test_a_stdio_or_unknown_server_needs_no_login(project: Path) -> None:
    trust_project(project, home=project.parent / "home")
    code, out = _run("login", str(project), "local")
    assert code == 2 and "stdio server: it needs no login" in out
    code, out = _run("login", str(project), "nope")
    assert code == 2 and "no MCP server 'nope'" in out and "docs, local" in out


def test_logout_without_a_login_says_so(project: Path) -> None:
    trust_project(project, home=project.parent / "home")
    approve_server(project, "docs", "http://127.0.0.1:9/mcp", home=project.parent / "home")
    code, out = _run("logout", str(project), "docs")
    assert code == 0 and "no login kept for docs" in out
