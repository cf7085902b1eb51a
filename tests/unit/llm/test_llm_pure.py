"""Pure cores of the LLM work: options, backoff, stream assembly."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from jidocode.services.conversation.llm.options import NO_KEY, resolve_api_key, resolve_options
from jidocode.services.conversation.llm.retry import MAX_RETRY_AFTER_S, backoff_delay
from jidocode.services.conversation.llm.stream import INVALID_ARGUMENTS_KEY, StreamAssembler
from jidocode.shared.errors import JidoError
from jidocode.shared.settings import LlmSettings

# --- options -------------------------------------------------------------------


def test_no_model_anywhere_is_not_configured() -> None:
    with pytest.raises(JidoError) as info:
        resolve_options({}, {})
    assert info.value.type == "llm_not_configured"
    assert "JIDO_LLM_MODEL" in info.value.message


def test_env_is_a_default_that_settings_override() -> None:
    env = {"JIDO_LLM_MODEL": "openai/env", "JIDO_LLM_API_BASE": "http://env"}
    assert resolve_options({}, env).model == "openai/env"
    assert resolve_options({}, env).api_base == "http://env"
    opts = resolve_options({"model": "anthropic/x", "api_base": None}, env)
    assert opts.model == "anthropic/x"
    assert opts.api_base == "http://env"


def test_settings_model_fields_are_accepted() -> None:
    dumped = LlmSettings(model="openai/gpt-4.1", temperature=0.1, max_retries=5).model_dump()
    opts = resolve_options(dumped, {})
    assert (opts.model, opts.temperature, opts.max_retries) == ("openai/gpt-4.1", 0.1, 5)


def test_invalid_value_is_named() -> None:
    with pytest.raises(JidoError) as info:
        resolve_options({"model": "m", "temperature": 9}, {})
    assert info.value.type == "llm_invalid_settings"
    assert "temperature" in info.value.message


def test_api_key_resolution() -> None:
    opts = resolve_options({"model": "m", "api_key_env": "K"}, {})
    assert resolve_api_key(opts, {"K": "secret"}) == "secret"
    with pytest.raises(JidoError) as info:
        resolve_api_key(opts, {})
    assert info.value.type == "llm_auth" and not info.value.retryable
    assert info.value.details == {"api_key_env": "K"}
    assert "K" in info.value.message
    assert resolve_api_key(resolve_options({"model": "m"}, {}), {}) is None
    assert resolve_api_key(resolve_options({"model": "m", "api_base": "http://x"}, {}), {}) == NO_KEY


# --- backoff -------------------------------------------------------------------


def test_backoff_doubles_then_caps() -> None:
    assert [backoff_delay(n, base_s=0.5, cap_s=3.0) for n in range(1, 6)] == [0.5, 1.0, 2.0, 3.0, 3.0]


def test_retry_after_wins_when_larger_but_is_bounded() -> None:
    assert backoff_delay(1, base_s=0.5, cap_s=3.0, retry_after_s=10) == 10
    assert backoff_delay(1, base_s=0.5, cap_s=3.0, retry_after_s=0.1) == 0.5
    assert backoff_delay(1, base_s=0.5, cap_s=3.0, retry_after_s=10_000) == MAX_RETRY_AFTER_S


def test_attempt_is_one_based() -> None:
    with pytest.raises(ValueError):
        backoff_delay(0, base_s=1, cap_s=1)


@given(
    attempt=st.integers(1, 10_000),
    base=st.floats(0, 60),
    cap=st.floats(0, 600),
    retry_after=st.one_of(st.none(), st.floats(-10, 1e6)),
)
def test_backoff_is_bounded(attempt: int, base: float, cap: float, retry_after: float | None) -> None:
    delay = backoff_delay(attempt, base_s=base, cap_s=cap, retry_after_s=retry_after)
    assert 0 <= delay <= max(cap, MAX_RETRY_AFTER_S)


# --- stream assembly -------------------------------------------------------------


def test_fragments_assemble_into_every_call_in_index_order() -> None:
    acc = StreamAssembler()
    acc.add_text("Let ")
    acc.add_tool_fragment(1, "b", "grep", "")
    acc.add_tool_fragment(0, "a", "read_file", '{"pa')
    acc.add_text("me")
    acc.add_tool_fragment(0, None, None, 'th": "x"}')
    acc.add_tool_fragment(1, None, None, '{"pattern": "y"}')
    acc.finish_reason = "tool_calls"
    result = acc.result()
    assert result.content == "Let me"
    assert [(c.id, c.name, c.arguments) for c in result.tool_calls] == [
        ("a", "read_file", {"path": "x"}),
        ("b", "grep", {"pattern": "y"}),
    ]
    assert result.finish_reason == "tool_calls"


def test_bad_arguments_are_kept_for_the_tool_runner_to_reject() -> None:
    acc = StreamAssembler()
    acc.add_tool_fragment(0, "a", "read_file", '{"path": ')
    acc.add_tool_fragment(1, None, "list_dir", "")
    acc.add_tool_fragment(2, "c", "x", "[1, 2]")
    calls = acc.result().tool_calls
    assert calls[0].arguments == {INVALID_ARGUMENTS_KEY: '{"path": '}
    assert calls[1].arguments == {}
    assert calls[1].id == "call_1"
    assert calls[2].arguments == {INVALID_ARGUMENTS_KEY: "[1, 2]"}


def test_repeated_name_is_not_doubled() -> None:
    acc = StreamAssembler()
    acc.add_tool_fragment(0, "a", "read_file", "{}")
    acc.add_tool_fragment(0, "a", "read_file", "")
    assert acc.result().tool_calls[0].name == "read_file"


_json_obj = st.dictionaries(st.text(max_size=5), st.one_of(st.integers(), st.text(max_size=10)), max_size=4)


@given(calls=st.lists(_json_obj, min_size=1, max_size=5), data=st.data())
def test_any_split_of_the_arguments_assembles_back(calls: list[dict[str, Any]], data: st.DataObject) -> None:
    acc = StreamAssembler()
    for index, args in enumerate(calls):
        raw = json.dumps(args)
        cuts = sorted(data.draw(st.lists(st.integers(0, len(raw)), max_size=6)))
        pieces = [raw[a:b] for a, b in zip([0, *cuts], [*cuts, len(raw)], strict=True)]
        acc.add_tool_fragment(index, f"id{index}", "t", pieces[0])
        for piece in pieces[1:]:
            acc.add_tool_fragment(index, None, None, piece)
    assert [c.arguments for c in acc.result().tool_calls] == calls


def test_tool_exposure() -> None:
    opts = resolve_options({"model": "m", "tools": {"expose": ["a", "b"], "unexpose": ["b"]}}, {})
    assert [n for n in ("a", "b", "c") if opts.tools.shown(n)] == ["a"]
    everything = resolve_options({"model": "m"}, {})
    assert all(everything.tools.shown(n) for n in ("a", "b"))
    only_not = resolve_options({"model": "m", "tools": {"unexpose": ["bash"]}}, {})
    assert not only_not.tools.shown("bash") and only_not.tools.shown("read_file")


# --- the scripted server's stream, assembled back ------------------------------------

_arg_values = st.one_of(st.integers(), st.text(max_size=12), st.booleans(), st.none())


@given(
    text=st.text(max_size=60),
    calls=st.lists(
        st.tuples(
            st.text("abcdefghij_", min_size=1, max_size=10),
            st.dictionaries(st.text("xyz", min_size=1, max_size=3), _arg_values, max_size=3),
        ),
        max_size=4,
    ),
    chunk=st.integers(1, 9),
)
def test_scripted_stream_assembles_back(
    text: str, calls: list[tuple[str, dict[str, Any]]], chunk: int
) -> None:
    from jidocode.cli.dev.scripted_llm import Reply, ScriptedToolCall, _chunks

    scripted = tuple(ScriptedToolCall(name=n, arguments=a) for n, a in calls)
    reply = (
        Reply.tools(*scripted, text=text, chunk_chars=chunk)
        if calls
        else Reply.answer(text, chunk_chars=chunk)
    )
    acc = StreamAssembler()
    for piece in _chunks(reply):
        delta = piece["delta"]
        acc.add_text(delta.get("content") or "")
        for tc in delta.get("tool_calls") or []:
            fn = tc.get("function") or {}
            acc.add_tool_fragment(tc["index"], tc.get("id"), fn.get("name"), fn.get("arguments"))
        if piece["finish_reason"]:
            acc.finish_reason = piece["finish_reason"]
    result = acc.result()
    assert result.content == text
    assert [(c.id, c.name, c.arguments) for c in result.tool_calls] == [
        (c.id, c.name, c.arguments) for c in scripted
    ]
    assert result.finish_reason == ("tool_calls" if calls else "stop")
