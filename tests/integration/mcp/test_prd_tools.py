"""The MCP server's PRD tools (``prd_list``, ``prd_status``, ``prd_run``, ``prd_pause``), driven by
the official Python SDK's ``Client`` against every service on a real nats-server: the prd service
runs a real loop (git in the sandbox, the ``jidocode`` provider's conversation on the scripted
model). The project's policy decides each tool by its name, trust included."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import mcp_types as types
import pytest
from mcp import Client

from jidocode.cli.dev.scripted_llm import Reply
from jidocode.services.mcp_gateway import build_server
from jidocode.shared.clients import EngineClient, PrdClient
from jidocode.shared.events.prd import StoryDraft
from tests.integration.mcp.support import McpSystem, mcp_system
from tests.integration.prd.helpers import Events, git, git_repo

__all__ = ["mcp_system"]

pytestmark = pytest.mark.slow

WAIT = 60.0
PRD_TOOLS = {"prd_list", "prd_status", "prd_run", "prd_pause"}


def _project(root: Path, permissions: dict[str, Any]) -> Path:
    """A git repository whose settings.json holds ``permissions`` (committed: the tree is clean)."""
    git_repo(root)
    (root / ".jido").mkdir()
    (root / ".jido" / "settings.json").write_text(json.dumps({"permissions": permissions}))
    (root / ".gitignore").write_text(".jido/\n.daedalus/\n")
    git(root, "add", ".gitignore")
    git(root, "commit", "-q", "-m", "ignore the data dirs")
    return root


def _text(result: types.CallToolResult) -> str:
    return " ".join(c.text for c in result.content if isinstance(c, types.TextContent))


async def _start(system: McpSystem, root: Path) -> str:
    return (await EngineClient(system.bus, timeout=30).start_project(str(root))).project_id


async def test_prd_tools_follow_the_projects_policy_and_drive_a_real_loop(
    mcp_system: McpSystem, tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    system = mcp_system
    # the fixture's project: trusted, its rules name no PRD tool and the default is deny
    async with Client(build_server(system.bus, system.project_id), mode="legacy") as client:
        listed = {t.name for t in (await client.list_tools()).tools}
        assert not listed & PRD_TOOLS and {"chat", "read_file"} <= listed
        refused = await client.call_tool("prd_list", {})
        assert refused.is_error and refused.structured_content is None
        assert "prd_list failed (permission_denied): no rule allows prd_list; default is deny" in _text(
            refused
        )
        assert 'add "prd_list" to permissions.allow' in _text(refused)

    # an untrusted project: its settings allow every PRD tool, and count for nothing
    allow_all = {"allow": sorted(PRD_TOOLS)}
    stranger = _project(tmp_path_factory.mktemp("untrusted") / "repo", allow_all)
    stranger_id = await _start(system, stranger)
    await PrdClient(system.bus, stranger_id, timeout=30).create("secret", stories=[StoryDraft(title="x")])
    async with Client(build_server(system.bus, stranger_id), mode="legacy") as client:
        assert not {t.name for t in (await client.list_tools()).tools} & PRD_TOOLS
        for tool, args in (
            ("prd_list", {}),
            ("prd_status", {"name": "secret"}),
            ("prd_run", {"name": "secret"}),
        ):
            result = await client.call_tool(tool, args)
            assert result.is_error, (tool, _text(result))
            assert f"{tool} failed (permission_denied)" in _text(result)
            assert "jidocode projects trust" in _text(result) and "secret" not in _text(result)
    assert (await PrdClient(system.bus, stranger_id, timeout=30).get("secret")).loop is None  # never ran

    # a trusted project allowing list, status and run, asking before a pause
    root = _project(tmp_path / "app", {"allow": ["prd_list", "prd_status", "prd_run"], "ask": ["prd_pause"]})
    project_id = await _start(system, root)
    events = Events()
    await events.follow(system.bus, project_id)
    await PrdClient(system.bus, project_id, timeout=30).create(
        "login", title="Log in", stories=[StoryDraft(title="Login form", acceptance_criteria=["a form"])]
    )
    asked: list[str] = []

    async def approve(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        asked.append(params.message)
        return types.ElicitResult(action="accept", content={"approve": True})

    # the model takes its time: the loop is mid-iteration while the tools look at it
    system.llm.script(Reply.answer("working on it", delay_s=300))
    async with Client(
        build_server(system.bus, project_id),
        mode="legacy",
        elicitation_callback=approve,
        read_timeout_seconds=WAIT,
    ) as client:
        assert {t.name for t in (await client.list_tools()).tools} >= PRD_TOOLS
        bad = await client.call_tool("prd_status", {"name": "../etc"})
        assert bad.is_error and "invalid arguments for prd_status: name:" in _text(bad)
        missing = await client.call_tool("prd_status", {"name": "nosuch"})
        assert missing.is_error and "prd_status failed (not_found)" in _text(missing)

        listed_prds = await client.call_tool("prd_list", {})
        assert not listed_prds.is_error and "login: ready, 0/1 stories passed" in _text(listed_prds)
        assert [p["name"] for p in (listed_prds.structured_content or {})["prds"]] == ["login"]

        ran = await client.call_tool("prd_run", {"name": "login"})
        assert not ran.is_error, _text(ran)
        assert (ran.structured_content or {})["state"] == "running"
        await system.llm.wait_requests(1, timeout=WAIT)  # the story's iteration asked the model

        status = await client.call_tool("prd_status", {"name": "login"})
        assert not status.is_error, _text(status)
        data = status.structured_content or {}
        assert data["loop"]["state"] == "running" and data["loop"]["story_id"] == "US-001"
        assert data["stories"][0]["acceptance_criteria"] == ["a form"]
        assert data["stories"][0]["state"] == "in_progress"
        assert "login: loop running, 0/1 stories passed, story US-001 attempt 1" in _text(status)

        paused = await client.call_tool("prd_pause", {"name": "login"})
        assert not paused.is_error, _text(paused)
        assert len(asked) == 1 and "JidoCode asks before running prd_pause" in asked[0]
        await events.wait_state("login", "paused")
        after = await client.call_tool("prd_status", {"name": "login"})
        assert (after.structured_content or {})["loop"]["state"] == "paused"
