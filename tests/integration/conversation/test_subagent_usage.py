"""A sub-agent's tokens show in its parent's usage and count against its budget (issue 25, point 7;
decisions 0253 and 0315): every service in this process, the real litellm adapter against the
scripted model (the sub-agents module's system), the ``task`` tool run by the parent's model.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from typing import Any

import pytest

from jidocode.cli.dev.scripted_llm import Reply, call
from jidocode.services.conversation.subagents.core import child_conversation_id
from tests.integration.conversation import test_subagents
from tests.integration.conversation.test_subagents import System

pytestmark = pytest.mark.asyncio(loop_scope="module")

#: The sub-agents module's system (every service, the scripted model behind a router).
system = test_subagents.system

#: Tokens of each scripted answer: the parent's small, the child's large.
PARENT = {"prompt_tokens": 10, "completion_tokens": 5}
CHILD = {"prompt_tokens": 1000, "completion_tokens": 100}


def _task_ids(timeline: list[dict[str, Any]]) -> list[str]:
    return [
        e["id"]
        for e in timeline
        if e["type"] == "conversation.tool.requested" and e["data"]["name"] == "task"
    ]


async def _show(system: System, conversation_id: str) -> dict[str, Any]:
    """``jidocode conversations show --json`` as a real process (the CLI's usage)."""
    url = system.bus.nc.connected_url
    assert url is not None
    env = {**os.environ, "NATS_URL": f"nats://{url.hostname}:{url.port}"}
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        "from jidocode.cli.main import app; app()",
        "conversations",
        "show",
        str(system.root),
        conversation_id,
        "--json",
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 120)
    assert proc.returncode == 0, err.decode()
    shown: dict[str, Any] = json.loads(out)
    return shown


async def test_a_finished_subagents_tokens_are_in_its_parents_usage(system: System) -> None:
    system.router.add(
        "usage parent",
        Reply.tools(call("task", description="count", prompt="child U: answer big"), **PARENT),
        Reply.answer("the child answered", **PARENT),
    )
    system.router.add("child U: answer big", Reply.answer("U: done", **CHILD))
    await system.ask("upar", "usage parent")
    timeline = await system.final("upar")
    [rid] = _task_ids(timeline)
    child = child_conversation_id("upar", rid)

    own = (await system.client.get_projection(child, "usage")).value
    assert (own["calls"], own["total_tokens"]) == (1, 1100)  # the child's own usage is its own
    usage = (await system.client.get_projection("upar", "usage")).value
    assert usage["calls"] == 3  # two of the parent, one of the child
    assert (usage["prompt_tokens"], usage["completion_tokens"], usage["total_tokens"]) == (1020, 110, 1130)
    assert usage["context_tokens"] == 15  # how full the parent's own context is: its last call

    shown = await _show(system, "upar")  # the CLI reads the same usage
    assert (shown["usage"]["calls"], shown["usage"]["total_tokens"]) == (3, 1130)


async def test_a_parents_budget_counts_its_finished_subagents(system: System) -> None:
    system.router.add(
        "budget parent",
        Reply.tools(call("task", description="spend", prompt="child B: spend a lot"), **PARENT),
        Reply.answer("over budget, yet answered", **PARENT),
    )
    system.router.add("child B: spend a lot", Reply.answer("B: spent", **CHILD))
    await system.client.start("bpar", settings={**system.settings, "budget_tokens": 500})
    await system.client.send_event("bpar", "conversation.user.message", {"text": "budget parent"})
    timeline = await system.wait_timeline(
        "bpar",
        lambda t: any(e["type"] in ("conversation.llm.failed", "conversation.assistant.message") for e in t),
    )
    # the child ran (its own 1100 tokens, under its own budget), then the parent's next call is
    # refused: 15 of its own + 1100 of its child >= 500
    assert [e["data"]["status"] for e in timeline if e["type"] == "conversation.subagent.completed"] == [
        "completed"
    ]
    [failed] = [e for e in timeline if e["type"] == "conversation.llm.failed"]
    assert failed["data"]["error_type"] == "llm_budget_exceeded"
    assert "1115/500 tokens" in failed["data"]["message"]
    assert not [e for e in timeline if e["type"] == "conversation.assistant.message"]
