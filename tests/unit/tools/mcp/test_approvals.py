"""The approvals of a project's HTTP MCP servers: per root, name and exact URL, fail closed."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest

from jidocode.services.tool_runner.mcp.approvals import (
    approval_store_path,
    approvals,
    approve_server,
    is_approved,
    revoke_server,
)
from jidocode.services.tool_runner.mcp.config import load_config, withhold_unapproved
from jidocode.shared.errors import InvalidInput


def _write(where: Path, servers: dict[str, object]) -> None:
    where.mkdir(parents=True, exist_ok=True)
    (where / ".mcp.json").write_text(json.dumps({"mcpServers": servers}))


def test_an_approval_is_of_one_root_one_name_one_url(tmp_path: Path) -> None:
    home, root, other = tmp_path / "home", tmp_path / "app", tmp_path / "other"
    root.mkdir()
    other.mkdir()
    approve_server(root, "docs", "https://a.example/mcp", home=home)
    assert is_approved(root, "docs", "https://a.example/mcp", home=home)
    assert not is_approved(root, "docs", "https://b.example/mcp", home=home)
    assert not is_approved(root, "wiki", "https://a.example/mcp", home=home)
    assert not is_approved(other, "docs", "https://a.example/mcp", home=home)
    assert stat.S_IMODE(approval_store_path(home).stat().st_mode) == 0o600
    assert [(a.server, a.url) for a in approvals(home=home)] == [("docs", "https://a.example/mcp")]
    assert revoke_server(root, "docs", home=home)
    assert not revoke_server(root, "docs", home=home)
    assert not is_approved(root, "docs", "https://a.example/mcp", home=home)


def test_a_broken_store_approves_nothing_and_is_not_overwritten(tmp_path: Path) -> None:
    home, root = tmp_path / "home", tmp_path / "app"
    root.mkdir()
    home.mkdir()
    approval_store_path(home).write_text("{not json")
    assert not is_approved(root, "docs", "https://a.example/mcp", home=home)
    with pytest.raises(InvalidInput, match="approval store is unusable"):
        approve_server(root, "docs", "https://a.example/mcp", home=home)
    assert approval_store_path(home).read_text() == "{not json"


def test_only_the_project_layers_unapproved_http_servers_are_withheld(tmp_path: Path) -> None:
    home, root = tmp_path / "home", tmp_path / "app"
    _write(home, {"mine": {"type": "http", "url": "https://mine.example/mcp"}})
    _write(
        root,
        {
            "docs": {"type": "http", "url": "https://docs.example/mcp"},
            "ok": {"type": "http", "url": "https://ok.example/mcp"},
            "tool": {"command": "/usr/bin/true"},
        },
    )
    config = load_config(root, global_home=home, trusted=True)
    kept = withhold_unapproved(config, lambda name, url: (name, url) == ("ok", "https://ok.example/mcp"))
    assert sorted(kept.servers) == ["mine", "ok", "tool"]
    assert kept.awaiting_approval == {"docs": "https://docs.example/mcp"}
    assert "docs" not in kept.layer
