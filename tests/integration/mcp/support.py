"""The system the MCP server tests run against: every service in-process on a real nats-server,
the conversation service's LLM calls going to the scripted model over HTTP, one project with
allow, ask and deny rules, a skill and a slash command."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from jidocode.cli.dev.scripted_llm import ScriptedLlm
from jidocode.services.conversation.llm import make_llm_port
from jidocode.services.registry import SERVICES, serve_many
from jidocode.shared import subjects
from jidocode.shared.bus import Bus
from jidocode.shared.clients import EngineClient
from jidocode.shared.config import Config
from jidocode.shared.envelope import Envelope
from tests.helpers import wait_for_services

__all__ = ["McpSystem", "mcp_system"]

SETTINGS = {
    "permissions": {
        "allow": ["Read", "Edit(src/**)", "Bash(echo:*)", "Bash(sleep:*)", "run_command", "load_skill"],
        "ask": ["Edit(ask/**)"],
        "deny": ["Bash(rm:*)"],
    },
    "tools": {"approval_timeout_s": 60},
}

SKILL = """---
name: notes-reader
description: Read project notes and summarise them.
allowed-tools: Read
---
# Notes reader

Reads notes.
"""

REVIEW = """---
description: Review one file
arguments:
  - {name: path, required: true, description: the file to review}
---
Review {{path}} carefully.
"""


@dataclass
class McpSystem:
    config: Config
    llm: ScriptedLlm
    bus: Bus
    project: Path
    project_id: str
    signals: list[Envelope]

    async def wait_signal(self, match: Callable[[Envelope], bool], timeout: float = 60.0) -> Envelope:
        """The first signal on the bus ``match`` accepts (waits for it, bounded)."""

        async def _wait() -> Envelope:
            while True:
                for env in list(self.signals):
                    if match(env):
                        return env
                await self.bus.nc.flush()  # a round trip: the signals in flight arrive meanwhile

        return await asyncio.wait_for(_wait(), timeout)


def write_project(root: Path) -> None:
    data = root / ".jido"
    (data / "skills" / "notes-reader").mkdir(parents=True)
    (data / "commands").mkdir()
    (data / "settings.json").write_text(json.dumps(SETTINGS))
    (data / "skills" / "notes-reader" / "SKILL.md").write_text(SKILL)
    (data / "commands" / "review.md").write_text(REVIEW)
    (root / "README.md").write_text("hello from the readme\n")
    (root / "src").mkdir()
    (root / "src" / "a.py").write_text("print('a')\n")
    (root / "ask").mkdir()
    (root / "ask" / "x.txt").write_text("before\n")


@pytest.fixture
async def mcp_system(
    config: Config, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[McpSystem]:
    async with ScriptedLlm() as llm:
        monkeypatch.setenv("JIDO_LLM_MODEL", "openai/scripted")
        monkeypatch.setenv("JIDO_LLM_API_BASE", llm.api_base)
        project = tmp_path / "proj"
        write_project(project)
        others = tuple(n for n in SERVICES if n != "conversation")
        stop = asyncio.Event()
        llm_bus = await Bus.connect(config, "conversation-llm")
        from jidocode.services.conversation.service import serve as serve_conversation

        tasks = [
            asyncio.create_task(serve_many(config, stop, others)),
            asyncio.create_task(serve_conversation(config, stop, llm=make_llm_port(config, bus=llm_bus))),
        ]
        bus = await Bus.connect(config, "mcp-test")
        signals: list[Envelope] = []

        async def on_signal(env: Envelope) -> None:
            signals.append(env)

        await bus.subscribe(subjects.signal_filter(), on_signal)
        try:
            await wait_for_services(config, (*others, "conversation"), timeout=30)
            info = await EngineClient(bus, timeout=15).start_project(str(project))
            yield McpSystem(config, llm, bus, project, info.project_id, signals)
        finally:
            stop.set()
            await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), 30)
            await bus.close()
            await llm_bus.close()
