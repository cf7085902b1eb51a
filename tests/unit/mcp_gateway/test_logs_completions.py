"""The pure parts of MCP logging and completions: an event's log level and data, path matching,
which argument names a path, the completion's bounds."""

from __future__ import annotations

from jidocode.services.mcp_gateway.completions import MAX_VALUES, completion, is_path_argument, path_matches
from jidocode.services.mcp_gateway.logs import MAX_LOG_DATA_CHARS, event_level, log_data
from jidocode.shared.envelope import Envelope


def test_event_levels() -> None:
    assert event_level("conversation.assistant.delta") is None  # progress carries the pieces
    assert event_level("conversation.error") == "error"
    assert event_level("conversation.llm.failed") == "error"
    assert event_level("conversation.tool.failed") == "warning"
    assert event_level("conversation.compaction.failed") == "warning"
    assert event_level("conversation.approval.requested") == "notice"
    assert event_level("conversation.tool.completed") == "info"
    assert event_level("conversation.llm.requested") == "debug"


def test_long_event_data_is_a_preview() -> None:
    short = Envelope(id="e1", type="conversation.tool.completed", source="t", data={"result": "hi"})
    assert log_data(short) == {"type": short.type, "id": short.id, "data": {"result": "hi"}}
    long = Envelope(
        id="e2",
        type="conversation.tool.completed",
        source="t",
        data={"result": "x" * (2 * MAX_LOG_DATA_CHARS)},
    )
    data = log_data(long)["data"]
    assert len(data["preview"]) == MAX_LOG_DATA_CHARS + 1 and data["chars"] > 2 * MAX_LOG_DATA_CHARS


def test_paths_complete_like_a_shell() -> None:
    entries = [
        {"name": "src", "type": "dir"},
        {"name": "setup.py", "type": "file"},
        {"name": ".env", "type": "file"},
        {"name": "README.md", "type": "file"},
    ]
    assert path_matches("", "s", entries) == ["src/", "setup.py"]
    assert path_matches("", "", entries) == ["src/", "setup.py", "README.md"]  # hidden only when asked
    assert path_matches("", ".", entries) == [".env"]
    assert path_matches("pkg", "R", entries) == ["pkg/README.md"]


def test_path_arguments_are_named_or_described_so() -> None:
    assert is_path_argument({"name": "path"})
    assert is_path_argument({"name": "target", "description": "the file to review"})
    assert is_path_argument({"name": "dir"})
    assert not is_path_argument({"name": "topic", "description": "what to write about"})


def test_a_completion_has_at_most_100_values_sorted() -> None:
    many = completion([f"v{i:03d}" for i in range(150)] + ["v000"])
    assert many.completion.values == [f"v{i:03d}" for i in range(MAX_VALUES)]
    assert many.completion.total == 150 and many.completion.has_more is True
    few = completion(["b", "a"])
    assert few.completion.values == ["a", "b"] and few.completion.has_more is False
