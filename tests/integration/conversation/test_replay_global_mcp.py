"""`jidocode replay` with a global MCP server configured in a fresh HOME (issue 25, point 7).

A conversation recorded while the user's own ``~/.jido_code/.mcp.json`` names a server was
offered that server's tools (and, here, called one whose answer changes with every call: the
time). The replay runs in a home of its own, where no such server exists; it must come out the
same all the same: the MCP tools the recording was offered are offered again, and each MCP call
is answered with its recorded result. No MCP server starts during the replay.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from jidocode.cli.dev.scripted_llm import Reply, ScriptedLlm, call
from jidocode.cli.replay import export_recording, read_recording, write_recording
from jidocode.client import JidoClient
from jidocode.services.conversation.llm import make_llm_port
from jidocode.services.conversation.service import serve as serve_conversation
from jidocode.services.registry import SERVICES, serve_many
from jidocode.shared.bus import Bus
from jidocode.shared.clients import ConversationsClient, ProjectClient
from jidocode.shared.config import Config
from jidocode.shared.natsserver import NatsServer
from jidocode.shared.trust import trust_project
from tests.helpers import wait_for_services
from tests.integration.tools.mcp_support import sandbox_readable, stdio, write_mcp_json

pytestmark = pytest.mark.slow

TIME_TOOL = "mcp__time__get_current_time"


@dataclass
class Recorded:
    """A system whose user's global layer (in a fresh HOME) names an MCP server."""

    home: Path
    global_home: Path
    project: Path
    config: Config
    bus: Bus
    llm: ScriptedLlm


@pytest.fixture
async def recorded(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[Recorded]:
    base = tmp_path_factory.mktemp("replay-mcp")
    home = base / "home"  # a fresh HOME: its ~/.jido_code is the global layer
    global_home = home / ".jido_code"
    project = base / "proj"
    global_home.mkdir(parents=True)
    (project / ".jido").mkdir(parents=True)
    (project / "README.md").write_text("hello\n")
    (project / ".jido" / "settings.json").write_text(
        json.dumps({"permissions": {"allow": ["Read", "mcp__time"]}})
    )
    (global_home / "settings.json").write_text(
        json.dumps({"permissions": {"additional_directories": sandbox_readable()}})
    )
    write_mcp_json(global_home, {"time": stdio("-m", "mcp_server_time", "--local-timezone", "UTC")})
    trust_project(project, home=global_home)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("JIDO_CODE_HOME", raising=False)
    monkeypatch.setenv("JIDO_MCP_START_TIMEOUT_S", "60")  # a loaded machine starts Python slowly
    async with ScriptedLlm() as llm:
        monkeypatch.setenv("JIDO_LLM_MODEL", "openai/scripted")
        monkeypatch.setenv("JIDO_LLM_API_BASE", llm.api_base)
        server = await asyncio.to_thread(NatsServer(store_dir=base / "js", sync="default").start)
        config = Config(nats_url=server.url, jido_home=global_home, instance="test")
        stop = asyncio.Event()
        others = tuple(n for n in SERVICES if n != "conversation")
        llm_bus = await Bus.connect(config, "conversation-llm")
        tasks = [
            asyncio.create_task(serve_many(config, stop, others)),
            asyncio.create_task(serve_conversation(config, stop, llm=make_llm_port(config, bus=llm_bus))),
        ]
        bus = await Bus.connect(config, "test")
        try:
            await wait_for_services(config, SERVICES, timeout=60)
            yield Recorded(home, global_home, project, config, bus, llm)
        finally:
            stop.set()
            await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), 60)
            await bus.close()
            await llm_bus.close()
            await asyncio.to_thread(server.stop)


async def _client_offered(system: Recorded, tool: str) -> JidoClient:
    """A conversation whose project lists ``tool`` (the server's first start may take a while)."""
    client = await JidoClient.connect(project_dir=system.project, bus=system.bus, settings={"max_retries": 0})
    project = ProjectClient(system.bus, client.project_id, timeout=60)

    async def listed() -> None:
        while tool not in {t.name for t in (await project.list_tools()).tools}:
            pass  # each listing waits up to 10 s for the server's first start

    await asyncio.wait_for(listed(), 180)
    return client


async def _replay_cli(recording: Path, project: Path, home: Path) -> tuple[int, str, str]:
    """``jidocode replay`` as the user runs it: a real process with the fresh HOME."""
    env = {k: v for k, v in os.environ.items() if k not in ("JIDO_CODE_HOME", "NATS_URL")}
    env["HOME"] = str(home)
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        "from jidocode.cli.main import app; app()",
        "replay",
        str(recording),
        "--project",
        str(project),
        "--json",
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 600)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


async def test_a_recording_with_global_mcp_tools_replays_the_same_without_them(
    recorded: Recorded, tmp_path: Path
) -> None:
    snapshot = tmp_path / "snapshot"
    shutil.copytree(recorded.project, snapshot)
    client = await _client_offered(recorded, TIME_TOOL)
    recorded.llm.script(
        Reply.tools(call(TIME_TOOL, timezone="UTC")),
        Reply.answer("It is some time in UTC."),
        Reply.answer("Nothing more."),
    )
    assert await client.send_message("What time is it?", timeout=180) == "It is some time in UTC."
    assert await client.send_message("Anything else?", timeout=120) == "Nothing more."
    assert client.conversation_id is not None
    conversations = ConversationsClient(recorded.bus, client.project_id, timeout=30)
    recording = await export_recording(
        conversations, client.conversation_id, root_path=str(recorded.project), trusted=True
    )
    await client.close()
    completed = [e for e in recording.entries if e["type"] == "conversation.tool.completed"]
    assert [e["data"]["name"] for e in completed] == [TIME_TOOL]  # the server answered the call
    offered = [
        e["data"]["offered_tools"] for e in recording.entries if e["type"] == "conversation.llm.completed"
    ]
    assert all(TIME_TOOL in names for names in offered)
    path = tmp_path / "with-mcp.jsonl"
    write_recording(path, recording)
    assert read_recording(path).header.entries == len(recording.entries)

    code, out, err = await _replay_cli(path, snapshot, recorded.home)
    assert code == 0, out + err
    report = json.loads(out)
    assert report["same"] is True, report
    assert report["answers_used"] == 3
