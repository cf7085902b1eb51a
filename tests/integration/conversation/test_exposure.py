"""``configure_tools`` on a running conversation takes effect at once (issue 12 item 7).

The exposure travels as the conversation's ``tools`` settings (``start`` merges
them); the conversation's owner reads its record again at each model call, so
the next call already shows only the exposed tools, and a call of a tool that
was just unexposed is refused without reaching the tool runner — on whichever
replica took the change.
"""

from __future__ import annotations

from jidocode.services.conversation.ports import LlmToolSpec
from jidocode.shared.bus import Bus
from jidocode.shared.config import Config

from ._support import (
    ScriptLlm,
    ToolsDouble,
    answer,
    answer_list_tools,
    conversations,
    follow,
    running_service,
    tool_calls,
)


async def test_unexpose_counts_from_the_next_model_call_of_a_running_conversation(
    bus: Bus, config: Config
) -> None:
    llm = ScriptLlm(answer("first"), tool_calls("grep"), answer("done"))
    tools = ToolsDouble()
    await answer_list_tools(bus, [LlmToolSpec(name="read_file"), LlmToolSpec(name="grep")])
    async with running_service(config, llm, tools) as runtime:
        client = conversations(bus)
        out = await follow(bus, "exp")
        await client.start("exp")
        await client.send_message("exp", "one")
        await out.wait_type("conversation.assistant.message")
        assert "tools" not in llm.requests[0].settings
        assert any(key.endswith(".exp") for key in runtime.owned)  # loaded, its record read already

        await client.start("exp", settings={"tools": {"unexpose": ["grep"]}})  # configure_tools
        await client.send_message("exp", "two")
        [failed] = await out.wait_type("conversation.tool.failed")
        assert llm.requests[1].settings["tools"] == {"unexpose": ["grep"]}
        assert failed.data["error_type"] == "unknown_tool" and failed.data["details"]["offered"] == [
            "read_file"
        ]
        assert tools.runs == []  # the unexposed tool never reached the tool runner
        await out.wait_type("conversation.assistant.message", 2)
