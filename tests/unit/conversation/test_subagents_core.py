"""The pure rules of sub-agents: templates, the task tool's input, limits, child ids and tools."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from jidocode.services.conversation.core import initial_state, run_to_idle
from jidocode.services.conversation.core.signal import Signal
from jidocode.services.conversation.llm.options import ToolExposure
from jidocode.services.conversation.settings import RuntimeSettings
from jidocode.services.conversation.subagents.core import (
    NO_TOOLS,
    REF_KEY,
    Refusal,
    SubagentRef,
    SubagentSettings,
    TaskArgs,
    cap_result,
    check_start,
    child_conversation_id,
    child_settings,
    child_tools,
    depth_of,
    outcome_of,
    parse_task_args,
    task_spec,
)
from jidocode.services.conversation.subagents.templates import (
    DEFAULT_TEMPLATE,
    MAX_TEMPLATE_BYTES,
    load_templates,
    parse_template,
)
from jidocode.shared import subjects
from jidocode.shared.events.conversation import Cancel, SubagentStarted

SETTINGS = SubagentSettings(max_per_conversation=2, max_depth=2, max_prompt_chars=50)


# -- templates ---------------------------------------------------------------------


def test_a_claude_code_agent_file_parses() -> None:
    text = (
        "---\nname: code-reviewer\ndescription: Reviews code\ntools: Read, grep,  glob\nmodel: sonnet\n---\n\n"
        "You review code.\n"
    )
    t = parse_template(text, path="/x/code-reviewer.md", layer="project")
    assert (t.name, t.description, t.system_prompt) == ("code-reviewer", "Reviews code", "You review code.")
    assert t.tools == ("Read", "grep", "glob")
    assert t.model is None  # Claude Code's alias: the parent's model


def test_name_defaults_to_the_file_and_tools_may_be_a_list_and_model_a_litellm_name() -> None:
    t = parse_template(
        "---\ntools: [read_file]\nmodel: openai/gpt-4.1-mini\n---\nbody", path="/a/helper.md", layer="global"
    )
    assert (t.name, t.tools, t.model) == ("helper", ("read_file",), "openai/gpt-4.1-mini")
    assert parse_template("just a prompt", path="/a/plain.md", layer="global").tools is None


def test_an_untrusted_project_template_keeps_its_prompt_and_tools_but_not_its_model() -> None:
    text = "---\ntools: read_file\nmodel: openai/expensive\n---\nprompt"
    t = parse_template(text, path="/p/x.md", layer="project", trusted=False)
    assert (t.model, t.tools, t.system_prompt) == (None, ("read_file",), "prompt")


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("---\nname: Bad Name\n---\n", "'name' must be"),
        ("---\ntools: 3\n---\n", "'tools' must be"),
        ("---\ndescription: [1]\n---\n", "'description' must be a string"),
        ("---\nmodel: 5\n---\n", "'model' must be a string"),
        ("---\nname: [unclosed\n---\n", "not valid YAML"),
        ("---\n!!python/object/apply:os.system ['true']\n---\n", "not valid YAML"),
        ("x" * (MAX_TEMPLATE_BYTES + 1), "larger than"),
    ],
)
def test_a_bad_template_is_a_clear_error(text: str, problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        parse_template(text, path="/p/bad.md", layer="project")


def test_the_project_layer_overrides_the_global_one_and_a_bad_file_blocks_nothing(tmp_path: Path) -> None:
    home, root = tmp_path / "home", tmp_path / "root"
    (home / "agents").mkdir(parents=True)
    (root / ".jido" / "agents").mkdir(parents=True)
    (home / "agents" / "a.md").write_text("---\ndescription: global a\nmodel: openai/g\n---\nga")
    (home / "agents" / "b.md").write_text("---\ndescription: global b\n---\ngb")
    (root / ".jido" / "agents" / "a.md").write_text("---\ndescription: project a\nmodel: openai/p\n---\npa")
    (root / ".jido" / "agents" / "broken.md").write_text("---\nname: [\n---\n")
    (root / ".jido" / "agents" / "notes.txt").write_text("not a template")
    found = load_templates(root, home=home, trusted=False)
    assert found.names() == ["a", "b", "general-purpose"]
    a, b = found.get("a"), found.get("b")
    assert a is not None and b is not None
    assert (a.description, a.layer, a.model) == ("project a", "project", None)  # untrusted: no model
    assert (b.layer, b.model) == ("global", None)
    assert [p.path for p in found.problems] == [str(root / ".jido" / "agents" / "broken.md")]
    assert found.get("") == DEFAULT_TEMPLATE and found.get("nope") is None
    trusted = load_templates(root, home=home, trusted=True)
    assert trusted.get("a") is not None and trusted.get("a").model == "openai/p"  # type: ignore[union-attr]


# -- the task tool -----------------------------------------------------------------


def test_task_args_are_validated_with_clear_errors() -> None:
    ok = parse_task_args({"description": "d", "prompt": "p", "subagent_type": "reader"}, SETTINGS)
    assert ok == TaskArgs(description="d", prompt="p", subagent_type="reader")
    missing = parse_task_args({"description": "d"}, SETTINGS)
    assert isinstance(missing, Refusal) and missing.error_type == "invalid_task_args"
    assert "prompt" in missing.message
    extra = parse_task_args({"description": "d", "prompt": "p", "model": "x"}, SETTINGS)
    assert isinstance(extra, Refusal) and "model" in extra.message
    long = parse_task_args({"description": "d", "prompt": "p" * 51}, SETTINGS)
    assert isinstance(long, Refusal) and "at most 50" in long.message


def test_depth_and_per_conversation_limits() -> None:
    assert check_start(parent_depth=1, running_here=1, settings=SETTINGS) is None
    deep = check_start(parent_depth=2, running_here=0, settings=SETTINGS)
    assert deep is not None and deep.error_type == "subagent_depth_exceeded"
    assert deep.details == {"depth": 2, "max_depth": 2}
    busy = check_start(parent_depth=0, running_here=2, settings=SETTINGS)
    assert busy is not None and busy.error_type == "subagent_quota_exceeded"
    assert busy.details["scope"] == "conversation"


def test_depth_comes_from_the_parent_reference() -> None:
    assert depth_of({}) == 0
    assert depth_of({REF_KEY: {"parent_conversation_id": "p", "request_id": "r", "depth": 2}}) == 2
    assert depth_of({REF_KEY: "garbage"}) == 0


@given(st.from_regex(subjects._TOKEN, fullmatch=True), st.text(min_size=1, max_size=300))
def test_child_ids_are_tokens_and_stable(parent: str, request_id: str) -> None:
    child = child_conversation_id(parent, request_id)
    assert subjects.validate_token(child) == child
    assert child == child_conversation_id(parent, request_id)
    assert child != child_conversation_id(parent, request_id + "x")


@given(
    st.one_of(st.none(), st.lists(st.sampled_from(["a", "b", "c", "task", "zz"]))),
    st.lists(st.sampled_from(["a", "b", "c", "task"]), unique=True),
)
def test_a_child_never_gets_more_tools_than_its_parent(template: list[str] | None, parent: list[str]) -> None:
    tools = child_tools(template, parent)
    assert set(tools) <= set(parent)
    if template is None:
        assert tools == parent
    else:
        assert set(tools) <= set(template)


def test_child_settings_carry_the_prompt_the_tools_and_the_reference() -> None:
    ref = SubagentRef(parent_conversation_id="p", request_id="r", depth=1, template="t")
    parent = {"model": "m", "api_base": "http://x", "tools": {"expose": ["a"]}, "system_prompt": "parent's"}
    out = child_settings(parent, ref=ref, system_prompt="child's", tools=["a"], model=None)
    assert out == {
        "model": "m",
        "api_base": "http://x",
        "system_prompt": "child's",
        "tools": {"expose": ["a"]},
        REF_KEY: ref.model_dump(mode="json"),
    }
    none = child_settings(parent, ref=ref, system_prompt="", tools=[], model="other")
    assert none["model"] == "other" and none["tools"] == {"expose": list(NO_TOOLS)}
    exposure = ToolExposure.model_validate(none["tools"])
    assert not any(exposure.shown(name) for name in ("read_file", "bash", "task"))


def test_the_task_spec_lists_the_agent_types(tmp_path: Path) -> None:
    (tmp_path / "agents").mkdir()
    (tmp_path / "agents" / "reader.md").write_text("---\ndescription: Reads files\n---\nx")
    spec = task_spec(load_templates(None, home=tmp_path, trusted=True))
    assert spec.name == "task"
    assert "- reader: Reads files" in spec.description
    assert spec.input_schema["properties"]["subagent_type"]["enum"] == ["general-purpose", "reader"]
    assert spec.input_schema["required"] == ["description", "prompt"]


@pytest.mark.parametrize(
    ("type_", "data", "status"),
    [
        ("conversation.turn.ended", {"outcome": "completed", "text": "done"}, "completed"),
        ("conversation.turn.ended", {"outcome": "failed", "error_type": "llm_auth"}, "failed"),
        ("conversation.turn.ended", {"outcome": "stopped", "error_type": "max_turns", "turns": 20}, "failed"),
        ("conversation.turn.ended", {"outcome": "cancelled", "message": "stop"}, "cancelled"),
        ("conversation.turn.ended", {"outcome": "no such"}, None),
        # the child's model calls, answers and cancel are no end: its conversation says when it is
        ("conversation.llm.completed", {"content": "done", "tool_calls": []}, None),
        ("conversation.llm.failed", {"error_type": "llm_context_overflow", "message": "long"}, None),
        ("conversation.loop.stopped", {"reason": "max_turns", "turns": 20}, None),
        ("conversation.cancel", {"reason": "stop"}, None),
        ("conversation.tool.completed", {}, None),
    ],
)
def test_outcome_of_a_child_entry(type_: str, data: dict[str, object], status: str | None) -> None:
    found = outcome_of(type_, data)
    assert (found.status if found else None) == status
    if found is not None and status == "completed":
        assert found.result == "done"


def test_a_long_answer_is_cut_with_a_marker() -> None:
    assert cap_result("abc", 64) == "abc"
    cut = cap_result("x" * 100, 64)
    assert cut.startswith("x" * 64) and "100 characters, 64 are kept" in cut


# -- settings and the reducer --------------------------------------------------------


def test_settings_from_the_environment_are_validated(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JIDO_CONV_SUBAGENTS_MAX_DEPTH", "3")
    monkeypatch.setenv("JIDO_CONV_SUBAGENTS_ENABLED", "false")
    s = RuntimeSettings.from_env().subagents
    assert (s.max_depth, s.enabled) == (3, False)
    monkeypatch.setenv("JIDO_CONV_SUBAGENTS_MAX_PER_PROJECT", "0")
    with pytest.raises(ValidationError, match="max_per_project"):
        RuntimeSettings.from_env()


def _signal(event: SubagentStarted | Cancel, sid: str) -> Signal:
    return Signal.of(event, id=sid, source="test", correlation_id="c", time="2026-01-01T00:00:00Z")


def test_a_child_started_after_the_parent_was_cancelled_is_cancelled() -> None:
    state, _ = run_to_idle(
        initial_state("p", "c"),
        [
            _signal(SubagentStarted(subagent_id="kid1", name="a", request_id="r1", description="d"), "s1"),
            _signal(Cancel(reason="stop"), "x"),
            _signal(SubagentStarted(subagent_id="kid2", name="b", request_id="r2"), "s2"),
        ],
    )
    assert state.pending_subagents == ()
    assert {k: (v.status, v.request_id) for k, v in state.subagents.items()} == {
        "kid1": ("cancelled", "r1"),
        "kid2": ("cancelled", "r2"),
    }
    assert state.subagents["kid1"].description == "d"
