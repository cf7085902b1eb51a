"""The PRD loop end to end: every service in this process plus the prd service, the default
``jidocode`` provider (a conversation of this system per iteration, its tools through the
policy and the tool runner), the real litellm adapter against the scripted model server, real
git, the checks in the real sandbox. One system for the module.

The scripted model answers by (PRD, story, attempt) read from the story prompt, and counts the
calls, so a resumed attempt (same number) can get another answer than the one that was cut.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from jidocode.cli.dev.scripted_llm import Reply, ScriptedLlm, call
from jidocode.services.registry import SERVICES, serve_many
from jidocode.shared.bus import Bus
from jidocode.shared.clients import EngineClient
from jidocode.shared.clients._prd import PrdClient
from jidocode.shared.config import Config
from jidocode.shared.events.prd import StoryDraft
from jidocode.shared.natsserver import NatsServer
from jidocode.shared.trust import trust_project
from tests.helpers import wait_for_services

from .helpers import WAIT, Events, Router, done, git, git_repo, jsonl, stream_events

pytestmark = pytest.mark.asyncio(loop_scope="module")

CHECK = "! grep -qs TODO two.txt"


class System:
    def __init__(self, bus: Bus, project_id: str, root: Path, router: Router) -> None:
        self.bus = bus
        self.project_id = project_id
        self.root = root
        self.router = router
        self.prds = PrdClient(bus, project_id, timeout=30)
        self.events = Events()

    def stories(self, name: str) -> list[dict[str, Any]]:
        doc = json.loads((self.root / ".daedalus" / "prds" / name / "prd.json").read_text())
        return list(doc["userStories"])


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def system(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[System]:
    base = tmp_path_factory.mktemp("prde2e")
    home = base / "home"
    home.mkdir()
    root = git_repo(base / "repo")
    trust_project(root, home=home)
    server = NatsServer(store_dir=base / "js", sync="default").start()
    saved = os.environ.get("JIDO_CODE_HOME")
    os.environ["JIDO_CODE_HOME"] = str(home)
    config = Config(nats_url=server.url, jido_home=home, instance="test")
    router = Router()
    stop = asyncio.Event()
    try:
        async with ScriptedLlm(responder=router) as llm:
            (home / "settings.json").write_text(
                json.dumps(
                    {
                        "llm": {"model": "openai/scripted", "api_base": llm.api_base, "max_retries": 0},
                        "permissions": {"allow": ["Read", "Write"]},
                        "prd": {
                            "retry": {"max_retries": 2, "retry_delays": [0, 0]},
                            "quality_commands": [CHECK],
                            "iteration_timeout_s": 120,
                        },
                    }
                )
            )
            task = asyncio.create_task(serve_many(config, stop, names=SERVICES))
            try:
                await wait_for_services(config, names=SERVICES, timeout=90)
                bus = await Bus.connect(config, "test")
                try:
                    info = await EngineClient(bus).start_project(str(root), timeout=30)
                    system = System(bus, info.project_id, root, router)
                    await system.events.follow(bus, info.project_id)
                    yield system
                finally:
                    await bus.close()
            finally:
                stop.set()
                await asyncio.wait_for(task, 30)
    finally:
        server.stop()
        if saved is None:
            os.environ.pop("JIDO_CODE_HOME", None)
        else:
            os.environ["JIDO_CODE_HOME"] = saved


async def test_a_two_story_prd_runs_end_to_end(system: System) -> None:
    r = system.router
    r.scripts[("e2e", "US-001", 1)] = [
        Reply.tools(call("write_file", path="one.txt", content="one\n")),
        done("Wrote one.txt."),
    ]
    r.scripts[("e2e", "US-002", 1)] = [
        Reply.tools(call("write_file", path="two.txt", content="two TODO\n")),
        done("Wrote two.txt, with a TODO."),
    ]
    r.scripts[("e2e", "US-002", 2)] = [
        Reply.tools(call("write_file", path="two.txt", content="two\n")),
        done("Removed the TODO."),
    ]
    await system.prds.create(
        "e2e",
        title="End to end",
        stories=[
            StoryDraft(title="Write one", acceptance_criteria=["one.txt says one"]),
            StoryDraft(title="Write two", acceptance_criteria=["two.txt has no TODO"]),
        ],
    )
    info = await system.prds.run("e2e")
    assert info.provider == "jidocode" and info.work_dir == str(system.root)
    await system.events.wait_state("e2e", "completed")

    assert git(system.root, "log", "--format=%s", "-2").splitlines() == [
        "US-002: Write two",
        "US-001: Write one",
    ]
    first = git(system.root, "show", "--name-only", "--format=", "HEAD~1").splitlines()
    assert [f for f in first if not f.startswith(".daedalus/")] == ["one.txt"]
    assert (system.root / "two.txt").read_text() == "two\n"
    # prd.json and progress.md are committed with each story: nothing is left over after the run
    assert {".daedalus/prds/e2e/prd.json", ".daedalus/prds/e2e/progress.md"} <= set(first)
    assert git(system.root, "status", "--porcelain", "--untracked-files=all") == ""
    assert [(s["passes"], s["inProgress"]) for s in system.stories("e2e")] == [(True, False), (True, False)]

    events = system.events.of("e2e")
    assert [e["ok"] for e in events if e["type"] == "prd.quality.report"] == [True, False, True]
    assert [e["story_id"] for e in events if e["type"] == "prd.retry.scheduled"] == ["US-002"]
    assert [e["tool"] for e in events if e["type"] == "prd.tool_started"] == ["write_file"] * 3
    assert any(e["type"] == "prd.assistant_text" and "TODO" in e["text"] for e in events)
    assert [e["type"] for e in events].count("prd.git.committed") == 2

    lines = jsonl(system.root / ".daedalus" / "prds" / "e2e" / "events.jsonl")
    assert [line["data"]["seq"] for line in lines] == list(range(1, len(lines) + 1))
    assert await stream_events(system.bus, system.project_id, "e2e") == lines
    assert [line["data"]["seq"] for line in lines] == [e["seq"] for e in events]  # the live order too
    log = (system.root / ".daedalus" / "prds" / "e2e" / "agent.log").read_text()
    assert "Removed the TODO." in log


async def test_pause_resume_and_stop_cut_a_model_call_in_flight(system: System) -> None:
    r = system.router
    r.first[("slow", "US-001", 1)] = Reply.answer("too late", delay_s=WAIT)
    r.scripts[("slow", "US-001", 1)] = [
        Reply.tools(call("write_file", path="slow.txt", content="slow\n")),
        done("Wrote slow.txt."),
    ]
    await system.prds.create("slow", stories=[StoryDraft(title="Slow")])
    await system.prds.run("slow")
    await system.events.wait(lambda: bool(system.events.of("slow", "prd.iteration_started")))
    await r.wait_asked(("slow", "US-001", 1))  # the model call is in flight

    paused = await system.prds.pause("slow")
    assert paused.state == "paused" and paused.story_id == "US-001" and paused.attempt == 1
    assert system.stories("slow")[0]["inProgress"] is True
    assert not (system.root / "slow.txt").exists()
    resumed = await system.prds.resume("slow")
    assert resumed.state == "running"
    await system.events.wait_state("slow", "completed")
    assert r.calls[("slow", "US-001", 1)] == 2  # the same attempt, asked again
    assert git(system.root, "log", "-1", "--format=%s") == "US-001: Slow"
    states = [(e["from_state"], e["to_state"]) for e in system.events.of("slow", "prd.loop.state_changed")]
    assert states == [
        ("ready", "running"),
        ("running", "paused"),
        ("paused", "running"),
        ("running", "completed"),
    ], system.events.summary()

    r.first[("halt", "US-001", 1)] = Reply.answer("too late", delay_s=WAIT)
    await system.prds.create("halt", stories=[StoryDraft(title="Halted")])
    await system.prds.run("halt")
    await r.wait_asked(("halt", "US-001", 1))
    stopped = await system.prds.stop("halt", reason="changed my mind")
    assert stopped.state == "stopped"
    assert system.stories("halt")[0]["inProgress"] is True  # sticky: a later run takes it up again


async def test_a_story_passes_only_when_the_answer_ends_with_the_completion_marker(system: System) -> None:
    """The ``jidocode`` provider reports a story done only when the model's final message ends with
    the marker: without it the attempt is ``nothing_done`` and tried again, told why."""
    r = system.router
    r.scripts[("marker", "US-001", 1)] = [
        Reply.tools(call("write_file", path="marker.txt", content="half\n")),
        Reply.answer("I wrote half of it."),
    ]
    r.scripts[("marker", "US-001", 2)] = [
        Reply.tools(call("write_file", path="marker.txt", content="whole\n")),
        done("Finished marker.txt."),
    ]
    await system.prds.create("marker", stories=[StoryDraft(title="Mark it")])
    await system.prds.run("marker")
    await system.events.wait_state("marker", "completed")
    [retry] = system.events.of("marker", "prd.retry.scheduled")
    assert retry["attempt"] == 1 and "did not report the story done" in retry["reason"]
    assert [(s["passes"], s["attempts"]) for s in system.stories("marker")] == [(True, 2)]
    assert git(system.root, "show", "HEAD:marker.txt") == "whole"
