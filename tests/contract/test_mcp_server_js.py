"""`jidocode mcp <dir>` driven by the official MCP JS SDK's ``Client`` (through node), as editors built
on it drive it: a failed call reaches the client as its real message. The SDK checks a result's
``structuredContent`` against the tool's ``outputSchema`` and throws ``-32602`` when it does not
match; an error result carries none (decision 0331). Skipped with the reason where node or the SDK
is missing (``tests/contract/mcp_js_sdk.py``)."""

from __future__ import annotations

import os
import sys
from typing import Any

import pytest

from jidocode.cli.dev.scripted_llm import Reply, call
from tests.contract.mcp_js_sdk import JsSdk, js_sdk
from tests.integration.mcp.support import McpSystem, mcp_system

__all__ = ["js_sdk", "mcp_system"]

pytestmark = pytest.mark.slow


def _command(system: McpSystem) -> tuple[list[str], dict[str, str]]:
    env = {**os.environ, "NATS_URL": system.config.nats_url}
    return [sys.executable, "-m", "jidocode.cli.main", "mcp", str(system.project)], env


def _call(name: str, **arguments: Any) -> dict[str, Any]:
    return {"method": "tools/call", "name": name, "arguments": arguments}


def _text(outcome: dict[str, Any]) -> str:
    assert outcome["ok"], f"the JS SDK threw: {outcome.get('error')}"
    return "".join(c.get("text", "") for c in outcome["result"]["content"])


async def test_failed_calls_reach_the_js_sdk_with_their_message(mcp_system: McpSystem, js_sdk: JsSdk) -> None:
    system = mcp_system
    command, env = _command(system)
    calls = [
        _call("read_file", path="README.md"),
        _call("read_file", path="nope.txt"),  # a missing file
        _call("read_file", path="/etc/passwd"),  # a path outside the project
        _call("bash", command="rm -rf src"),  # denied by Bash(rm:*)
        _call("write_file", path="ask/x.txt", content="after\n"),  # an ask nobody can answer here
    ]
    read, missing, outside, denied, asked, *_ = await js_sdk.drive(command, env, calls)

    assert read["ok"] and read["result"].get("isError") is not True, read
    assert read["result"]["structuredContent"]["content"].strip() == "hello from the readme"

    for outcome in (missing, outside, denied, asked):
        assert outcome["ok"], f"the JS SDK threw instead of showing the error: {outcome.get('error')}"
        assert outcome["result"]["isError"] is True
        assert "structuredContent" not in outcome["result"]
    assert _text(missing).startswith("read_file failed (") and "nope.txt" in _text(missing)
    assert missing["result"]["_meta"]["jidocode/error"]["error"] == "not_found"
    assert "read_file failed (" in _text(outside)
    assert "Bash(rm:*)" in _text(denied) and "permission_denied" in _text(denied)
    assert "Edit(ask/**)" in _text(asked) and "does not support elicitation" in _text(asked)
    assert asked["result"]["_meta"]["jidocode/error"] == {"error": "approval_needed", "rule": "Edit(ask/**)"}
    assert (system.project / "ask" / "x.txt").read_text() == "before\n"
    assert (system.project / "src" / "a.py").exists()


async def test_logging_and_completions_through_the_js_sdk(mcp_system: McpSystem, js_sdk: JsSdk) -> None:
    system = mcp_system
    system.llm.script(Reply.tools(call("read_file", path="README.md")), Reply.answer("It says hello."))
    command, env = _command(system)
    calls = [
        {"method": "server/capabilities"},
        {"method": "logging/setLevel", "level": "info"},
        _call("chat", message="What does the readme say?"),
        {
            "method": "completion/complete",
            "ref": {"type": "ref/prompt", "name": "review"},
            "argument": {"name": "path", "value": "sr"},
        },
        {
            "method": "completion/complete",
            "ref": {"type": "ref/resource", "uri": "jidocode://skills/{name}"},
            "argument": {"name": "name", "value": "notes"},
        },
    ]
    capabilities, level, chat, path, skill, tail = await js_sdk.drive(command, env, calls)

    assert "logging" in capabilities["result"] and "completions" in capabilities["result"]
    assert level["ok"], level
    assert (
        _text(chat) == "It says hello." and chat["result"]["structuredContent"]["answer"] == "It says hello."
    )
    assert path["ok"] and path["result"]["completion"]["values"] == ["src/"]
    assert skill["ok"] and skill["result"]["completion"]["values"] == ["notes-reader"]
    logged = [(entry["level"], entry["data"]["type"]) for entry in tail["logs"]]
    assert ("info", "conversation.tool.completed") in logged
    assert all(level != "debug" for level, _ in logged)
    assert {entry["logger"] for entry in tail["logs"]} == {"jidocode.conversation"}
