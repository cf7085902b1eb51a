"""A conversation replica killed (SIGKILL) while a sub-agent runs: the child finishes on the other
replica and its answer still reaches the parent.

Two conversation services run as processes (``python -m jidocode.services.conversation``) with
the real litellm adapter against the scripted model; the tool runner is played by the
responder of ``test_durability`` (answers only when told, the same answer to a request sent
again), so the child is surely mid-tool-call when its replica dies.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from jidocode.cli.dev.scripted_llm import Reply, ScriptedLlm, call
from jidocode.services.conversation.ports import LlmToolSpec
from jidocode.services.conversation.residency import LOADED_PREFIX
from jidocode.services.conversation.runtime import record_key
from jidocode.services.conversation.subagents.core import child_conversation_id
from jidocode.shared import subjects
from jidocode.shared.bus import Bus
from jidocode.shared.config import Config
from jidocode.shared.lease import holder_of

from ._support import P, answer_list_tools, conversations, follow, register_project
from .test_durability import Proc, ToolResponder
from .test_subagents import Router

pytestmark = pytest.mark.slow

#: Bounds for a loaded machine (two replica processes importing litellm beside other tests).
WAIT = 90.0


class SlowStart(Proc):
    """A replica given longer to come up: importing litellm took 33 s with both cores busy."""

    async def _ready(self, timeout: float = 30.0) -> None:
        await super()._ready(timeout=max(timeout, 150.0))


@pytest.fixture
async def replicas(config: Config) -> AsyncIterator[list[Proc]]:
    await register_project(config)
    started: list[Proc] = []
    yield started
    for proc in started:
        await proc.terminate()


@pytest.mark.timeout(400)
async def test_replica_killed_while_a_child_runs_the_child_finishes(
    bus: Bus,
    config: Config,
    replicas: list[Proc],
    tmp_path: Path,
    scripted_llm: ScriptedLlm,
    scripted_llm_settings: dict[str, Any],
) -> None:
    router = Router()
    scripted_llm.responder = router
    router.add(
        "delegate",
        Reply.tools(call("task", description="read it", prompt="child K: read a.txt")),
        Reply.answer("the child said it"),
    )
    router.add("child K: read a.txt", Reply.tools(call("read_file", path="a.txt")), Reply.answer("K: done"))
    await answer_list_tools(bus, [LlmToolSpec(name="read_file"), LlmToolSpec(name="grep")])
    tools = ToolResponder(bus)
    await tools.start()
    replicas.extend(
        await asyncio.gather(
            SlowStart(config, "s1", tmp_path).start(), SlowStart(config, "s2", tmp_path).start()
        )
    )
    # who owns a conversation: its key in the loaded set (decision 0327)
    loaded = await bus.kv(subjects.BUCKET_CONVERSATIONS)
    out = await follow(bus, "kp")
    await conversations(bus).start("kp", settings={**scripted_llm_settings, "max_retries": 0})
    await conversations(bus).send_event("kp", "conversation.user.message", {"text": "delegate"})

    # the child is mid-tool-call: its replica dies before the tool answers
    rid = await asyncio.wait_for(tools.arrived.get(), WAIT)
    [requested] = await out.wait_type("conversation.tool.requested", timeout=WAIT)
    child = child_conversation_id("kp", requested.id)
    entry = await loaded.get(LOADED_PREFIX + record_key(P, child))
    owner = holder_of(entry.value) or ""
    victim = next(p for p in replicas if f"conversation/{p.name}/" in owner)
    survivor = next(p for p in replicas if p is not victim)
    await victim.kill()

    # the survivor takes the child over (its lease expired) and sends its tool call again
    again = await asyncio.wait_for(tools.arrived.get(), WAIT)
    assert again == rid
    await tools.answer(rid)
    [answer] = await out.wait_type("conversation.assistant.message", timeout=WAIT)
    assert answer.data["text"] == "the child said it"

    timeline = (await conversations(bus).get_projection("kp", "timeline")).value
    results = [
        e for e in timeline if e["type"] in ("conversation.tool.completed", "conversation.tool.failed")
    ]
    assert [(e["type"], e["data"].get("data")) for e in results] == [
        ("conversation.tool.completed", "K: done")
    ], (
        results,
        [p.log.read_text()[-3000:] for p in replicas],
    )
    entry = await loaded.get(LOADED_PREFIX + record_key(P, child))
    assert f"conversation/{survivor.name}/" in (holder_of(entry.value) or "")
    child_timeline = (await conversations(bus).get_projection(child, "timeline")).value
    types = [e["type"] for e in child_timeline]
    assert types.count("conversation.user.message") == 1  # the prompt was applied once
    assert types.count("conversation.tool.completed") == 1
    status = (await conversations(bus).get_projection("kp", "subagent_status")).value
    assert status[child]["status"] == "completed" and status[child]["result"] == "K: done"
