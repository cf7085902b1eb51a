"""A conversation whose journal ends in the middle of a step (the service was killed between two
fenced appends) carries on when it is loaded again: the missing entries are journaled and the
model is asked, instead of the conversation waiting for nothing."""

from __future__ import annotations

from typing import Any

from jidocode.services.conversation.core import Emit, Signal, initial_state, run_to_idle
from jidocode.services.conversation.journal import Journal
from jidocode.services.conversation.ports import LlmToolSpec
from jidocode.shared.bus import Bus
from jidocode.shared.config import Config
from jidocode.shared.events.tools import ToolCallMeta, ToolResult

from ._support import (
    P,
    ScriptLlm,
    ToolsDouble,
    answer,
    answer_list_tools,
    conversations,
    follow,
    running_service,
    tool_calls,
)


async def test_a_step_cut_by_a_crash_is_carried_on_after_a_reload(bus: Bus, config: Config) -> None:
    cid = "cut-1"
    llm = ScriptLlm(answer("carried on"))
    await answer_list_tools(bus, [LlmToolSpec(name="read_file")])
    client = conversations(bus)
    # What a killed service left: the step "user message -> llm.requested" journaled up to its
    # first entry only.
    message = Signal(
        id="01CUTSTEPUSERMESSAGE00000A",
        type="conversation.user.message",
        source="client/test",
        data={"text": "are you there?"},
        correlation_id="01CUTSTEPUSERMESSAGE00000A",
        time="2026-11-25T00:00:00Z",
    )
    _, intents = run_to_idle(initial_state(P, cid), [message])
    step = [i.entry for i in intents if isinstance(i, Emit)]
    assert [e.type for e in step] == ["conversation.user.message", "conversation.llm.requested"]
    async with running_service(config, llm, ToolsDouble()):  # (it makes the streams)
        await Journal(bus).append(P, cid, step[0], expected_last=0)
        out = await follow(bus, cid)
        await client.start(cid)
        await client.get_projection(cid, "diagnostics")  # loads it: rebuilt from the cut journal
        [done] = await out.wait_type("conversation.assistant.message")
        assert done.data["text"] == "carried on"
        timeline = (await client.get_projection(cid, "timeline")).value
        types = [e["type"] for e in timeline]
        assert types[:2] == ["conversation.user.message", "conversation.llm.requested"]
        assert timeline[1]["id"] == step[1].id  # the very entry the step first made
        assert types.count("conversation.user.message") == 1 and len(llm.requests) == 1


class _BrokenTools(ToolsDouble):
    """A tool port that breaks its contract (raises what is not a JidoError), as the NATS port did
    when the client's connection was down mid-restart."""

    async def run(self, project_id: str, name: str, args: dict[str, Any], meta: ToolCallMeta) -> ToolResult:
        await super().run(project_id, name, args, meta)
        raise RuntimeError("outbound buffer limit exceeded")


async def test_a_tool_port_that_raises_ends_the_call_instead_of_hanging(bus: Bus, config: Config) -> None:
    llm = ScriptLlm(tool_calls("read_file"), answer("went on"))
    await answer_list_tools(bus, [LlmToolSpec(name="read_file")])
    client = conversations(bus)
    async with running_service(config, llm, _BrokenTools()):
        out = await follow(bus, "broken-1")
        await client.start("broken-1")
        await client.send_message("broken-1", "read it")
        [failed] = await out.wait_type("conversation.tool.failed")
        assert failed.data["error_type"] == "internal" and "outbound buffer" in failed.data["message"]
        [done] = await out.wait_type("conversation.assistant.message")
        assert done.data["text"] == "went on"
