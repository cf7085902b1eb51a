"""``.mcp.json``: Claude Code's format, one bad entry never hides the others, trust gates the project layer."""

from __future__ import annotations

import json
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from jidocode.services.tool_runner.mcp.config import (
    MAX_CONFIG_BYTES,
    MAX_SERVERS,
    HttpServer,
    StdioServer,
    load_config,
    parse_config,
)


def _raw(servers: object) -> bytes:
    return json.dumps({"mcpServers": servers}).encode()


def test_claude_code_format_stdio_and_http() -> None:
    servers, problems = parse_config(
        _raw(
            {
                "time": {"command": "uvx", "args": ["mcp-server-time"], "env": {"TZ": "UTC"}},
                "docs": {
                    "type": "http",
                    "url": "https://example.com/mcp",
                    "headers": {"Authorization": "Bearer x"},
                },
                "explicit": {"type": "stdio", "command": "srv"},
            }
        ),
        "f",
    )
    assert problems == []
    assert servers["time"] == StdioServer(command="uvx", args=["mcp-server-time"], env={"TZ": "UTC"})
    assert servers["docs"] == HttpServer(
        type="http", url="https://example.com/mcp", headers={"Authorization": "Bearer x"}
    )
    assert isinstance(servers["explicit"], StdioServer)


def test_a_bad_entry_names_its_field_and_spares_the_others() -> None:
    servers, problems = parse_config(
        _raw(
            {
                "good": {"command": "srv"},
                "noargs": {"command": "srv", "args": "not-a-list"},
                "nourl": {"type": "http", "url": "ftp://x"},
                "badenv": {"command": "srv", "env": {"1BAD": "x"}},
                "bad__name": {"command": "srv"},
                "weird": {"type": "websocket", "url": "ws://x"},
            }
        ),
        "/p/.mcp.json",
    )
    assert list(servers) == ["good"]
    by_server = {p.server: str(p) for p in problems}
    assert "args" in by_server["noargs"] and "/p/.mcp.json: mcpServers.noargs" in by_server["noargs"]
    assert "url" in by_server["nourl"]
    assert "1BAD" in by_server["badenv"]
    assert "invalid server name" in by_server["bad__name"]
    assert "weird" in by_server


def test_a_bad_file_is_one_problem() -> None:
    assert "not valid JSON" in str(parse_config(b"{nope", "f")[1][0])
    assert "mcpServers" in str(parse_config(b'{"mcpServers": []}', "f")[1][0])
    assert "JSON object" in str(parse_config(b"[]", "f")[1][0])


def test_server_count_is_bounded() -> None:
    servers, problems = parse_config(_raw({f"s{i}": {"command": "x"} for i in range(MAX_SERVERS + 2)}), "f")
    assert len(servers) == MAX_SERVERS
    assert len(problems) == 2 and all("more than" in p.problem for p in problems)


def test_layers_trust_and_override(tmp_path: Path) -> None:
    home, root = tmp_path / "home", tmp_path / "root"
    home.mkdir()
    root.mkdir()
    (home / ".mcp.json").write_bytes(_raw({"time": {"command": "global-time"}, "g": {"command": "g"}}))
    (root / ".mcp.json").write_bytes(_raw({"time": {"command": "project-time"}, "p": {"command": "p"}}))

    trusted = load_config(root, global_home=home, trusted=True)
    assert trusted.servers["time"] == StdioServer(command="project-time")
    assert trusted.layer == {"time": "project", "g": "global", "p": "project"}
    assert trusted.untrusted == []

    untrusted = load_config(root, global_home=home, trusted=False)
    assert untrusted.servers == {"time": StdioServer(command="global-time"), "g": StdioServer(command="g")}
    assert untrusted.untrusted == ["p", "time"]


def test_an_oversized_or_broken_file_is_reported_not_raised(tmp_path: Path) -> None:
    (tmp_path / ".mcp.json").write_bytes(b" " * (MAX_CONFIG_BYTES + 1))
    cfg = load_config(tmp_path, global_home=tmp_path / "nohome", trusted=True)
    assert cfg.servers == {} and "larger than" in cfg.problems[0].problem


@given(st.text(min_size=1, max_size=60))
def test_only_valid_server_names_are_kept(name: str) -> None:
    servers, problems = parse_config(_raw({name: {"command": "x"}}), "f")
    ok = name in servers
    assert ok != bool(problems)
    if ok:
        assert "__" not in name and name[0].isalnum() and len(name) <= 48
