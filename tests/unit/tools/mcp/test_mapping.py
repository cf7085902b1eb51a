"""MCP tools as JidoCode tools: names, specs, results; the rules (default ask); the backoff."""

from __future__ import annotations

import json

import mcp_types as types
import pytest
from hypothesis import given
from hypothesis import strategies as st

from jidocode.services.tool_runner.mcp.backoff import Backoff
from jidocode.services.tool_runner.mcp.host import start_timeout_from_env
from jidocode.services.tool_runner.mcp.mapping import (
    MAX_ARTIFACT_CHARS,
    fit,
    mcp_name,
    split_name,
    tool_result,
    tool_spec,
)
from jidocode.services.tool_runner.mcp.rules import mcp_decision, mcp_exposed
from jidocode.services.tool_runner.mcp.sandboxed import LaunchSpec, server_argv
from jidocode.shared.policy import Effect, Policy

_PART = st.from_regex(r"[A-Za-z0-9][A-Za-z0-9-]{0,10}", fullmatch=True)


@given(_PART, st.from_regex(r"[A-Za-z0-9_-]{1,20}", fullmatch=True))
def test_names_round_trip(server: str, tool: str) -> None:
    assert split_name(mcp_name(server, tool)) == (server, tool)


@pytest.mark.parametrize("name", ["read_file", "mcp__", "mcp__time", "mcp____x", "mcp__time__"])
def test_other_names_are_not_mcp(name: str) -> None:
    assert split_name(name) is None


def test_spec_keeps_schemas_and_maps_annotations() -> None:
    tool = types.Tool(
        name="get_current_time",
        description="Now",
        input_schema={"type": "object", "properties": {"timezone": {"type": "string"}}},
        output_schema={"type": "object"},
        annotations=types.ToolAnnotations(read_only_hint=True, open_world_hint=False),
    )
    spec = tool_spec("time", tool)
    assert spec is not None
    assert spec.name == "mcp__time__get_current_time"
    assert "Now" in spec.description and "time" in spec.description
    assert spec.input_schema["properties"] == {"timezone": {"type": "string"}}
    assert spec.output_schema == {"type": "object"}
    assert spec.safety.read_only and not spec.safety.destructive and not spec.safety.open_world
    assert tool_spec("time", types.Tool(name="bad name!", input_schema={"type": "object"})) is None


def test_results_text_structured_images_and_errors() -> None:
    ok = tool_result(
        "s",
        "t",
        types.CallToolResult(
            content=[
                types.TextContent(text="a"),
                types.ImageContent(data="aGk=", mime_type="image/png"),
                types.TextContent(text="b"),
            ],
            structured_content={"n": 1},
        ),
    )
    assert ok.ok and ok.data == {"text": "a\nb", "structured": {"n": 1}}
    assert ok.artifacts == [{"type": "image", "mime_type": "image/png", "data": "aGk="}]

    big = tool_result(
        "s",
        "t",
        types.CallToolResult(
            content=[types.ImageContent(data="x" * (MAX_ARTIFACT_CHARS + 1), mime_type="image/png")]
        ),
    )
    assert "omitted" in big.artifacts[0] and "data" not in big.artifacts[0]

    err = tool_result("s", "t", types.CallToolResult(content=[types.TextContent(text="boom")], is_error=True))
    assert not err.ok and err.error is not None
    assert err.error.type == "mcp_tool_error" and err.error.message == "boom"
    assert err.error.details == {"server": "s", "tool": "t"}


def test_rules_server_and_tool_default_ask() -> None:
    policy = Policy.build(
        "/tmp", allow=["mcp__time"], deny=["mcp__git__git_commit"], ask=["mcp__git__git_status"]
    )
    assert mcp_decision(policy, "mcp__time__get_current_time").effect is Effect.ALLOW
    assert mcp_decision(policy, "mcp__git__git_commit").effect is Effect.DENY
    assert mcp_decision(policy, "mcp__git__git_status").effect is Effect.ASK
    assert mcp_decision(policy, "mcp__git__git_log").effect is Effect.ASK  # no rule: ask
    assert mcp_decision(policy, "mcp__timex__x").effect is Effect.ASK  # mcp__time is not a prefix of timex
    assert not mcp_exposed(policy, "mcp__git__git_commit")
    assert mcp_exposed(policy, "mcp__git__git_log")
    assert not mcp_exposed(Policy.build("/tmp", deny=["mcp__git"]), "mcp__git__git_log")


def test_backoff_doubles_caps_and_forgives() -> None:
    b = Backoff(initial_s=1, max_s=4, healthy_after_s=60)
    assert [b.crashed(t, started_at=t) for t in (0, 1, 2, 3)] == [1, 2, 4, 4]
    assert b.wait(3) == 4 and b.wait(7) == 0
    assert b.crashed(100, started_at=30) == 1  # ran 70 s: a fresh start
    with pytest.raises(ValueError, match="initial_s"):
        Backoff(initial_s=0)


def test_start_timeout_env_is_checked() -> None:
    assert start_timeout_from_env({}) == 20.0
    assert start_timeout_from_env({"JIDO_MCP_START_TIMEOUT_S": "3"}) == 3.0
    for bad in ("x", "0.1", "1000"):
        with pytest.raises(ValueError, match="JIDO_MCP_START_TIMEOUT_S"):
            start_timeout_from_env({"JIDO_MCP_START_TIMEOUT_S": bad})


def test_server_env_is_set_inside_the_sandbox_by_env() -> None:
    spec = LaunchSpec(command="srv", args=["-x"], env={"B": "2", "A": "1"}, root="/r")
    assert server_argv(spec) == ["/usr/bin/env", "A=1", "B=2", "srv", "-x"]
    assert server_argv(spec.model_copy(update={"env": {}})) == ["srv", "-x"]
    with pytest.raises(ValueError, match="'='"):
        server_argv(spec.model_copy(update={"command": "A=1"}))


def test_results_are_cut_to_the_size_limit() -> None:
    huge = tool_result("s", "t", types.CallToolResult(content=[types.TextContent(text="x" * 500_000)]))
    cut = fit(huge, 64 * 1024)
    assert len(json.dumps(cut.model_dump())) <= 64 * 1024
    assert "output truncated" in cut.logs and cut.data["text"].startswith("xxx")
    images = [types.ImageContent(data="a" * 30_000, mime_type="image/png") for _ in range(10)]
    many = fit(tool_result("s", "t", types.CallToolResult(content=images)), 64 * 1024)
    assert 0 < len(many.artifacts) < 10
    assert any("artifacts dropped" in line for line in many.logs)
    small = tool_result("s", "t", types.CallToolResult(content=[types.TextContent(text="hi")]))
    assert fit(small, 64 * 1024) == small
