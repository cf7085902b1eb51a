"""The MCP server's rewind tools (``checkpoints_list``, ``checkpoints_diff``, ``rewind``; issue 30
point 2, docs/rewind.md), driven by the official Python SDK's ``Client`` against every service on
a real nats-server: a turn of the scripted model writes files in the sandbox, the user changes
another one, and ``rewind`` shows the diff without ``confirm`` and restores with it, the user's
file kept. The project's policy decides each tool by its name, as for the PRD tools."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import mcp_types as types
import pytest
from mcp import Client

from jidocode.cli.dev.scripted_llm import Reply, call
from jidocode.client import JidoClient
from jidocode.services.mcp_gateway import build_server
from tests.integration.mcp.support import McpSystem, mcp_system

__all__ = ["mcp_system"]

pytestmark = pytest.mark.slow

WAIT = 60.0
REWIND_TOOLS = {"checkpoints_list", "checkpoints_diff", "rewind"}


def _text(result: types.CallToolResult) -> str:
    return " ".join(c.text for c in result.content if isinstance(c, types.TextContent))


def _project(root: Path) -> Path:
    """A project whose settings allow its source's edits and the rewind tools (trusted: under tmp_path)."""
    (root / ".jido").mkdir(parents=True)
    permissions = {"allow": ["Read", "Edit(src/**)", *sorted(REWIND_TOOLS)]}
    (root / ".jido" / "settings.json").write_text(json.dumps({"permissions": permissions}))
    (root / "src").mkdir()
    (root / "src" / "a.py").write_text("print('a')\n")
    (root / "src" / "b.py").write_text("print('b')\n")
    return root


async def test_rewind_shows_the_diff_then_restores_on_confirm(mcp_system: McpSystem, tmp_path: Path) -> None:
    system = mcp_system
    # the fixture's project: its rules name no rewind tool and the default is deny
    async with Client(build_server(system.bus, system.project_id), mode="legacy") as client:
        assert not {t.name for t in (await client.list_tools()).tools} & REWIND_TOOLS
        refused = await client.call_tool("rewind", {"conversation_id": "c1", "message_id": "m1"})
        assert refused.is_error and "rewind failed (permission_denied): no rule allows rewind" in _text(
            refused
        )

    root = _project(tmp_path / "rw")
    sdk = await JidoClient.connect(project_dir=root, bus=system.bus, config=system.config)
    try:
        system.llm.script(
            Reply.tools(
                call("write_file", path="src/a.py", content="print('agent')\n"),
                call("write_file", path="src/c.py", content="made by the agent\n"),
            ),
            Reply.answer("changed"),
        )
        assert await sdk.send_message("change the files", timeout=WAIT) == "changed"
        history = await sdk.get_history()
        assert sdk.conversation_id is not None
        cid = sdk.conversation_id

        async with Client(
            build_server(system.bus, sdk.project_id), mode="legacy", read_timeout_seconds=WAIT * 2
        ) as client:
            assert {t.name for t in (await client.list_tools()).tools} >= REWIND_TOOLS
            listed = await client.call_tool("checkpoints_list", {"conversation_id": cid})
            assert not listed.is_error, _text(listed)
            data: dict[str, Any] = listed.structured_content or {}
            [message] = [m for m in data["messages"] if m["text"] == "change the files"]
            [checkpoint] = data["checkpoints"]

            args = {"conversation_id": cid, "message_id": message["id"], "what": "both"}
            preview = await client.call_tool("rewind", args)  # no confirm: the diff, nothing done
            assert not preview.is_error, _text(preview)
            shown = preview.structured_content or {}
            assert shown["done"] is False and shown["conversation"] is None and shown["files"] is None
            assert (shown["diff"]["modified"], shown["diff"]["deleted"]) == (["src/a.py"], ["src/c.py"])
            assert "restore src/a.py" in _text(preview) and "delete src/c.py" in _text(preview)
            assert (root / "src" / "a.py").read_text() == "print('agent')\n" and (
                root / "src" / "c.py"
            ).exists()
            assert await sdk.get_history() == history

            (root / "src" / "b.py").write_text("print('user')\n")  # the user's own change, after the turn
            diffed = await client.call_tool("checkpoints_diff", {"checkpoint": checkpoint["id"]})
            assert (diffed.structured_content or {})["changed_by_user"] == ["src/b.py"], _text(diffed)
            assert "restore src/b.py (changed since by somebody else: kept)" in _text(diffed)

            done = await client.call_tool("rewind", {**args, "confirm": True})
            assert not done.is_error, _text(done)
            outcome = done.structured_content or {}
            assert outcome["done"] is True and outcome["files"]["kept"] == ["src/b.py"]
            assert outcome["conversation"]["message_id"] == message["id"]
        assert (root / "src" / "a.py").read_text() == "print('a')\n" and not (root / "src" / "c.py").exists()
        assert (root / "src" / "b.py").read_text() == "print('user')\n"
        assert await sdk.get_history() == []
    finally:
        await sdk.close()
