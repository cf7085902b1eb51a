"""The MCP tools and results a replay reads from a recording (``cli/replay_mcp.py``, decision 0315)."""

from __future__ import annotations

from typing import Any

from jidocode.cli.replay_mcp import call_key, recorded_results, recorded_tools


def _entry(id_: str, type_: str, **data: Any) -> dict[str, Any]:
    return {"id": id_, "type": f"conversation.{type_}", "data": data}


ENTRIES = [
    _entry(
        "l1",
        "llm.completed",
        request_id="l1",
        offered_tools=["read_file", "mcp__time__get_current_time", "mcp__time__convert_time", "task"],
        tool_calls=[{"id": "c1", "name": "mcp__time__get_current_time", "arguments": {"timezone": "UTC"}}],
    ),
    _entry(
        "r1", "tool.requested", call_id="c1", name="mcp__time__get_current_time", args={"timezone": "UTC"}
    ),
    _entry(
        "r1:result",
        "tool.completed",
        request_id="r1",
        call_id="c1",
        name="mcp__time__get_current_time",
        data={"t": 1},
    ),
    _entry(
        "r2", "tool.requested", call_id="c2", name="mcp__time__get_current_time", args={"timezone": "UTC"}
    ),
    _entry(
        "r2:result",
        "tool.failed",
        request_id="r2",
        call_id="c2",
        name="mcp__time__get_current_time",
        error_type="mcp_tool_error",
        message="bad zone",
    ),
    _entry("r3", "tool.requested", call_id="c3", name="read_file", args={"path": "a"}),
    _entry("r3:result", "tool.completed", request_id="r3", call_id="c3", name="read_file", data="a"),
]


def test_the_mcp_tools_in_the_order_first_offered() -> None:
    assert recorded_tools(ENTRIES) == ["mcp__time__get_current_time", "mcp__time__convert_time"]


def test_results_by_tool_and_arguments_in_recorded_order_built_ins_left_out() -> None:
    results = recorded_results(ENTRIES)
    assert list(results) == [call_key("mcp__time__get_current_time", {"timezone": "UTC"})]
    first, second = results[call_key("mcp__time__get_current_time", {"timezone": "UTC"})]
    assert first.ok and first.data == {"t": 1}
    assert not second.ok and second.error is not None
    assert (second.error.type, second.error.message) == ("mcp_tool_error", "bad zone")


def test_a_call_key_ignores_the_order_of_arguments() -> None:
    assert call_key("t", {"a": 1, "b": 2}) == call_key("t", {"b": 2, "a": 1})
