"""A prd service killed mid-story: another one resumes the SAME story (sticky ``inProgress``) and
completes it. The prd service runs as its own process (``python -m jidocode.services.prd``, as
``jidocode serve prd``) with a short lease; the other services, the scripted model and the
nats-server run in the test process. The first process is killed with SIGKILL while the model's
answer is delayed, so the story is in flight and nothing gets to clean up.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from jidocode.cli.dev.scripted_llm import Reply, ScriptedLlm, call
from jidocode.services.prd.config import ProviderSettings
from jidocode.services.prd.providers.base import Abandons, ProviderContext
from jidocode.services.prd.providers.jidocode import JidocodeProvider
from jidocode.services.prd.store import LoopStore, lease_key
from jidocode.services.registry import SERVICES, serve_many
from jidocode.shared.bus import Bus
from jidocode.shared.clients import ConversationsClient, EngineClient
from jidocode.shared.clients._prd import PrdClient
from jidocode.shared.config import Config
from jidocode.shared.envelope import new_id
from jidocode.shared.errors import InvalidInput
from jidocode.shared.events.prd import StoryDraft
from jidocode.shared.natsserver import NatsServer
from jidocode.shared.trust import trust_project
from tests.helpers import wait_for_services

from .helpers import Events, Router, done, git, git_repo, jsonl, stream_events

pytestmark = pytest.mark.asyncio(loop_scope="module")


class System:
    def __init__(self, bus: Bus, config: Config, env: dict[str, str], project_id: str, root: Path) -> None:
        self.bus = bus
        self.config = config
        self.env = env
        self.project_id = project_id
        self.root = root
        self.prds = PrdClient(bus, project_id, timeout=30)
        self.events = Events()

    @contextmanager
    def prd_process(self, instance: str) -> Iterator[subprocess.Popen[bytes]]:
        proc = subprocess.Popen(
            [sys.executable, "-m", "jidocode.services.prd"],
            env={**self.env, "JIDO_INSTANCE": instance},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            yield proc
        finally:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(30)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(30)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def system(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[tuple[System, Router]]:
    base = tmp_path_factory.mktemp("prdrecovery")
    home = base / "home"
    home.mkdir()
    data = base / "data"
    data.mkdir()
    root = git_repo(base / "repo")
    trust_project(root, home=home)
    server = NatsServer(store_dir=base / "js", sync="default").start()
    saved = os.environ.get("JIDO_CODE_HOME")
    os.environ["JIDO_CODE_HOME"] = str(home)
    config = Config(nats_url=server.url, jido_home=home, instance="test")
    router = Router()
    stop = asyncio.Event()
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("NATS_", "JIDO_"))},
        "NATS_URL": server.url,
        "JIDO_CODE_HOME": str(home),
        "JIDO_DATA_HOME": str(data),
        "JIDO_PRD_HEARTBEAT_S": "0.3",
        "JIDO_PRD_LEASE_S": "2",
        "JIDO_LOG_LEVEL": "WARNING",
    }
    try:
        async with ScriptedLlm(responder=router) as llm:
            (home / "settings.json").write_text(
                json.dumps(
                    {
                        "llm": {"model": "openai/scripted", "api_base": llm.api_base, "max_retries": 0},
                        "permissions": {"allow": ["Read", "Write"]},
                        "prd": {
                            "retry": {"max_retries": 1, "retry_delays": [0]},
                            "quality_commands": ["true"],
                        },
                    }
                )
            )
            # every service but prd in this process: the prd service runs in the processes the
            # test starts and kills
            others = tuple(name for name in SERVICES if name != "prd")
            task = asyncio.create_task(serve_many(config, stop, names=others))
            try:
                await wait_for_services(config, names=others, timeout=90)
                bus = await Bus.connect(config, "test")
                try:
                    info = await EngineClient(bus).start_project(str(root), timeout=30)
                    system = System(bus, config, env, info.project_id, root)
                    await system.events.follow(bus, info.project_id)
                    yield system, router
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


async def test_a_killed_prd_service_is_resumed_on_the_same_story(system: tuple[System, Router]) -> None:
    s, router = system
    key = ("crash", "US-002", 1)
    router.scripts[("crash", "US-001", 1)] = [
        Reply.tools(call("write_file", path="first.txt", content="first\n")),
        done("Wrote first.txt."),
    ]
    router.first[key] = Reply.answer("never heard", delay_s=30)  # in flight when the service dies
    router.scripts[key] = [
        Reply.tools(call("write_file", path="second.txt", content="second\n")),
        done("Wrote second.txt."),
    ]
    with s.prd_process("prd-a") as first:
        await wait_for_services(s.config, names=("prd",), timeout=60)
        await s.prds.create("crash", stories=[StoryDraft(title="First"), StoryDraft(title="Second")])
        await s.prds.run("crash")
        await router.wait_asked(key)
        first.send_signal(signal.SIGKILL)
        assert first.wait(30) == -signal.SIGKILL

    doc = json.loads((s.root / ".daedalus" / "prds" / "crash" / "prd.json").read_text())
    assert [(st["passes"], st["inProgress"]) for st in doc["userStories"]] == [(True, False), (False, True)]
    stored = await (await LoopStore.open(s.bus)).get(s.project_id, "crash")
    assert stored is not None and stored.record.info.state == "running"
    assert stored.record.info.owner.endswith("prd-a") and stored.record.info.story_id == "US-002"
    # the dead owner's iteration is a conversation of this system, still waiting on its model
    dead = stored.record.iteration_id
    conversations = ConversationsClient(s.bus, s.project_id, timeout=30)
    [left] = (await conversations.list(conversation_id=dead)).conversations
    assert left.status == "active"
    killed_at = len(s.events.of("crash"))

    with s.prd_process("prd-b"):
        await s.events.wait_state("crash", "completed")

    # the new owner stopped it before it ran the attempt again (it would have answered in 30 s
    # and stayed active: nobody else stops it), and its own iteration is another conversation
    [abandoned] = (await conversations.list(conversation_id=dead)).conversations
    assert abandoned.status == "stopped"
    stored = await (await LoopStore.open(s.bus)).get(s.project_id, "crash")
    assert stored is not None and stored.record.iteration_id not in ("", dead)

    assert router.calls[key] == 2  # the same story and attempt, asked again by the new owner
    assert git(s.root, "log", "--format=%s", "-2").splitlines() == ["US-002: Second", "US-001: First"]
    after: list[dict[str, Any]] = s.events.of("crash")[killed_at:]
    assert {e.get("story_id") for e in after} <= {"US-002", ""}
    assert not any(e["type"] == "prd.story.state_changed" and e["to_state"] == "in_progress" for e in after)
    sources = {env.source.split("/")[-1] for env in s.events.seen if env.data.get("prd") == "crash"}
    assert sources == {"prd-a", "prd-b"}
    lines = jsonl(s.root / ".daedalus" / "prds" / "crash" / "events.jsonl")
    assert [line["data"]["seq"] for line in lines] == list(range(1, len(lines) + 1))
    assert await stream_events(s.bus, s.project_id, "crash") == lines


async def test_a_cleanly_stopped_prd_service_hands_its_loop_over_at_once(
    system: tuple[System, Router],
) -> None:
    s, router = system
    key = ("calm", "US-001", 1)
    router.first[key] = Reply.answer("never heard", delay_s=30)
    router.scripts[key] = [
        Reply.tools(call("write_file", path="calm.txt", content="calm\n")),
        done("Wrote calm.txt."),
    ]
    with s.prd_process("prd-c") as proc:
        await wait_for_services(s.config, names=("prd",), timeout=60)
        await s.prds.create("calm", stories=[StoryDraft(title="Calm")])
        await s.prds.run("calm")
        await router.wait_asked(key)
        proc.send_signal(signal.SIGTERM)
        assert await asyncio.to_thread(proc.wait, 30) == 0
    store = await LoopStore.open(s.bus)
    stored = await store.get(s.project_id, "calm")
    assert stored is not None and stored.record.info.state == "running"
    lease = await store.leases(2.0).read(lease_key(s.project_id, "calm"))
    assert lease.holder is None and lease.revision > stored.revision  # released: nothing to wait out
    with s.prd_process("prd-d"):
        await s.events.wait_state("calm", "completed")
    assert router.calls[key] == 2
    assert git(s.root, "log", "-1", "--format=%s") == "US-001: Calm"


async def test_abandoning_is_quiet_for_what_is_gone_and_refuses_a_bad_name(
    system: tuple[System, Router],
) -> None:
    s, _ = system
    provider = JidocodeProvider(ProviderSettings(), ProviderContext(bus=s.bus, project_id=s.project_id))
    assert isinstance(provider, Abandons)
    await provider.abandon(new_id().lower(), str(s.root))  # never started: nothing to stop
    with pytest.raises(InvalidInput, match="iteration id"):
        await provider.abandon("a.b>", str(s.root))
