"""`jidocode prd draft` against the whole system in this process (every service, the real
litellm adapter against the scripted model server): the model's prd.md streams to the terminal,
is parsed, and with --yes becomes prd.json; a malformed answer is an error naming what it lacks
and writes nothing; a declined draft writes nothing. The drafting conversation is offered the
read-only tools only. One system for the module; the CLI runs through typer's CliRunner in a
worker thread (its own event loop, as from a terminal).
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from click.testing import Result
from typer.testing import CliRunner

from jidocode.cli.dev.scripted_llm import Reply, ScriptedLlm
from jidocode.cli.main import app
from jidocode.cli.prd_draft import READ_ONLY_TOOLS
from jidocode.services.registry import SERVICES, serve_many
from jidocode.shared.bus import Bus
from jidocode.shared.clients import EngineClient
from jidocode.shared.config import Config
from jidocode.shared.natsserver import NatsServer
from jidocode.shared.trust import trust_project
from tests.e2e.test_first_chat import Terminal
from tests.helpers import wait_for_services

from .helpers import WAIT, git_repo

pytestmark = pytest.mark.asyncio(loop_scope="module")

PRD_MD = """# Task priorities

Users rank their tasks.

## US-001: Priority field
Priority: 1

### Acceptance criteria
- a priority column exists
- the migration runs

## US-002: Priority badge
Priority: 2

As a user I see the priority at a glance.

### Acceptance criteria
- each card shows a badge
"""


@dataclass
class Model:
    """Answers a draft request by the PRD name its prompt carries; keeps every request."""

    answers: dict[str, str] = field(default_factory=dict)
    bodies: list[dict[str, Any]] = field(default_factory=list)

    #: Seconds between streamed chunks, by PRD name (default none).
    slow: dict[str, float] = field(default_factory=dict)

    def __call__(self, body: dict[str, Any]) -> Reply:
        self.bodies.append(body)
        prompt = json.dumps(body.get("messages") or [])
        for name, answer in self.answers.items():
            if f"named '{name}'" in prompt:
                return Reply.answer(answer, chunk_chars=16, chunk_delay_s=self.slow.get(name, 0.0))
        return Reply.error(500, "not a draft prompt")


@dataclass
class System:
    root: Path
    model: Model
    env: dict[str, str]
    nats_url: str

    async def cli(self, *args: str, input: str | None = None) -> Result:
        runner = CliRunner()
        return await asyncio.wait_for(
            asyncio.to_thread(runner.invoke, app, list(args), input=input, env=self.env), WAIT
        )


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def system(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[System]:
    base = tmp_path_factory.mktemp("prddraft")
    home = base / "home"
    home.mkdir()
    root = git_repo(base / "repo")
    trust_project(root, home=home)
    server = NatsServer(store_dir=base / "js", sync="default").start()
    saved = os.environ.get("JIDO_CODE_HOME")
    os.environ["JIDO_CODE_HOME"] = str(home)
    config = Config(nats_url=server.url, jido_home=home, instance="test")
    model = Model()
    stop = asyncio.Event()
    try:
        async with ScriptedLlm(responder=model) as llm:
            settings = {
                "llm": {"model": "openai/scripted", "api_base": llm.api_base, "max_retries": 0},
                "permissions": {"allow": ["Read"]},
            }
            (home / "settings.json").write_text(json.dumps(settings))
            task = asyncio.create_task(serve_many(config, stop, names=SERVICES))
            try:
                await wait_for_services(config, names=SERVICES, timeout=90)
                bus = await Bus.connect(config, "test")
                try:
                    await EngineClient(bus).start_project(str(root), timeout=30)
                finally:
                    await bus.close()
                env = {"NATS_URL": server.url, "JIDO_CODE_HOME": str(home), "COLUMNS": "200"}
                yield System(root, model, env, server.url)
            finally:
                stop.set()
                await asyncio.wait_for(task, 30)
    finally:
        server.stop()
        if saved is None:
            os.environ.pop("JIDO_CODE_HOME", None)
        else:
            os.environ["JIDO_CODE_HOME"] = saved


def _flat(result: Result) -> str:
    return " ".join(result.output.split())


async def test_a_draft_streams_is_shown_and_with_yes_becomes_prd_json(system: System) -> None:
    system.model.answers["prio"] = "Here it is.\n\n" + PRD_MD
    result = await system.cli("prd", "draft", str(system.root), "prio", "Let users rank their tasks", "--yes")
    assert result.exit_code == 0, result.output
    out = _flat(result)
    assert "drafting prio" in out and "Here it is." in out  # the model's text as it came
    assert "US-001 Priority field priority 1 - a priority column exists - the migration runs" in out
    assert "created prio with 2 stories" in out

    stored = json.loads((system.root / ".daedalus/prds/prio/prd.json").read_text())
    assert stored["title"] == "Task priorities" and stored["description"] == "Users rank their tasks."
    assert [(s["id"], s["priority"], s["acceptanceCriteria"]) for s in stored["userStories"]] == [
        ("US-001", 1, ["a priority column exists", "the migration runs"]),
        ("US-002", 2, ["each card shows a badge"]),
    ]
    asked = system.model.bodies[-1]
    offered = {t["function"]["name"] for t in asked.get("tools") or []}
    assert {"read_file", "grep"} <= offered <= set(READ_ONLY_TOOLS)  # nothing that writes or runs
    assert not offered & {"write_file", "edit_file", "bash"}
    assert "Let users rank their tasks" in json.dumps(asked["messages"])


async def test_a_malformed_or_declined_draft_writes_nothing(system: System, tmp_path: Path) -> None:
    system.model.answers["broken"] = "# Half a PRD\n\n## US-001: Something\nPriority: 1\n"
    notes = tmp_path / "notes.md"
    notes.write_text("Some notes about a feature.\n")
    result = await system.cli("prd", "draft", str(system.root), "broken", "--from", str(notes), "--yes")
    assert result.exit_code == 2, result.output
    assert (
        "the draft lacks acceptance criteria for story '## US-001: Something' (a '### Acceptance criteria' list)"
        in _flat(result)
    )
    assert not (system.root / ".daedalus/prds/broken").exists()

    # on a terminal: the text shows while the model still writes; declined, nothing is written
    system.model.answers["declined"] = "Writing it now.\n\n" + PRD_MD
    system.model.slow["declined"] = 0.1
    env = {**os.environ, "NATS_URL": system.nats_url, "JIDO_CODE_HOME": system.env["JIDO_CODE_HOME"]}
    argv = [
        sys.executable,
        "-m",
        "jidocode.cli.main",
        "prd",
        "draft",
        str(system.root),
        "declined",
        "A feature",
    ]
    term = Terminal(argv, {**env, "COLUMNS": "200", "TERM": "xterm-256color"})
    at = await term.expect("Writing it now.")
    assert "each card shows a badge" not in term.screen  # the end is not written yet
    at = await term.expect("create PRD declined from this draft? [y/N]:", after=at)
    term.type("n")
    await term.expect("nothing written", after=at)
    assert await term.close() == 1
    assert not (system.root / ".daedalus/prds/declined").exists()
