"""The sequencer (pure): whatever a provider's mapping produces, the stream keeps the contract's order."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from jidocode.services.prd.providers import claude, codex, gemini
from jidocode.services.prd.providers.base import ProviderEvent
from jidocode.services.prd.providers.sequence import (
    TEXT_CAP,
    Sequencer,
    classify,
    clip,
    clip_input,
    replay,
    safe_normalize,
)
from jidocode.shared.events.prd import NORMALIZED_KINDS

_ids = st.sampled_from(["", "a", "b", "c"])
_events = st.builds(
    ProviderEvent,
    kind=st.sampled_from(NORMALIZED_KINDS),
    text=st.text(max_size=20),
    tool=st.sampled_from(["", "bash", "Read"]),
    call_id=_ids,
    command=st.sampled_from(["", "make test"]),
    metadata=st.sampled_from([{}, {"delta": "true"}, {"failure": "config"}, {"usage.input_tokens": "7"}]),
)


def _check(events: list[ProviderEvent]) -> None:
    kinds = [e.kind for e in events]
    assert kinds[0] == "iteration_started" and kinds.count("iteration_started") == 1
    assert kinds[-1] in ("iteration_finished", "error")
    assert sum(k in ("iteration_finished", "error") for k in kinds) == 1
    started: set[str] = set()
    finished: set[str] = set()
    outputs: set[str] = set()
    for ev in events:
        if ev.kind == "tool_started" and ev.call_id:
            assert ev.call_id not in started
            started.add(ev.call_id)
        elif ev.kind == "command_output" and ev.call_id:
            assert ev.call_id in started and ev.call_id not in outputs and ev.call_id not in finished
            outputs.add(ev.call_id)
        elif ev.kind == "tool_finished" and ev.call_id:
            assert ev.call_id in started and ev.call_id not in finished
            finished.add(ev.call_id)
        if ev.kind == "assistant_text":
            assert ev.metadata.get("delta") != "true" and len(ev.text) <= TEXT_CAP + 40
    assert started == finished


@settings(max_examples=80, deadline=None)
@given(
    batches=st.lists(st.lists(_events, max_size=5), max_size=8),
    exit_code=st.sampled_from([0, 1, None]),
    stopped=st.sampled_from([None, ("cancelled", "stop")]),
)
def test_any_stream_comes_out_in_contract_order(
    batches: list[list[ProviderEvent]], exit_code: int | None, stopped: Any
) -> None:
    seq = Sequencer("p")
    out = seq.open()
    for batch in batches:
        out += seq.feed(batch)
    tail, result = seq.finish(exit_code=exit_code, stopped=stopped)
    _check(out + tail)
    assert result.ok == (tail[-1].kind == "iteration_finished")
    assert result.ok or result.failure in ("transient", "config", "fatal", "cancelled")
    if stopped is not None:
        assert result.failure == "cancelled"


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=10),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)
_types = st.sampled_from(
    [
        "thread.started",
        "item.started",
        "item.completed",
        "turn.completed",
        "turn.failed",
        "error",
        "system",
        "assistant",
        "user",
        "result",
        "init",
        "message",
        "tool_use",
        "tool_result",
        "new.kind",
    ]
)
_natives = st.builds(
    lambda t, body, item: {"type": t, **body, "item": item, "message": item},
    _types,
    st.dictionaries(
        st.sampled_from(
            ["subtype", "role", "delta", "content", "status", "error", "usage", "stats", "tool_id"]
        ),
        _json,
        max_size=5,
    ),
    st.dictionaries(
        st.sampled_from(["type", "id", "text", "content", "status", "exit_code", "changes"]), _json
    ),
)


@settings(max_examples=60, deadline=None)
@given(native=_natives)
def test_no_native_event_crashes_a_mapping(native: dict[str, Any]) -> None:
    for module in (codex, claude, gemini):
        events = module.normalize(native)  # not safe_normalize: the mappings themselves hold
        assert all(isinstance(e, ProviderEvent) for e in events)


def test_unknown_native_events_map_to_nothing() -> None:
    for module in (codex, claude, gemini):
        assert module.normalize({"type": "telemetry.ping", "x": 1}) == []
        assert module.normalize({}) == []


def test_safe_normalize_swallows_only_shape_errors() -> None:
    def broken(native: dict[str, Any]) -> list[ProviderEvent]:
        return [ProviderEvent(kind="assistant_text", text=native["missing"])]

    assert safe_normalize(broken, {}) == []


def test_garbage_lines_are_skipped_and_counted() -> None:
    lines = ["not json", "[1, 2]", "", '{"type": "turn.completed", "usage": {"input_tokens": 3}}']
    events, result = replay("codex", codex.normalize, lines)
    assert [e.kind for e in events] == ["iteration_started", "iteration_finished"]
    assert result.ok and result.usage == {"input_tokens": 3}
    assert result.metadata["skipped_lines"] == "2"


def test_a_stream_without_a_result_is_a_transient_failure_quoting_stderr() -> None:
    events, result = replay("codex", codex.normalize, ['{"type": "turn.started"}'], stderr="boom\n")
    assert events[-1].kind == "error"
    assert result.failure == "transient" and result.error == "codex ended without a result: boom"


def test_classify() -> None:
    assert classify("Invalid API key · Please run /login") == "config"
    assert classify("The model `o9` does not exist: unknown model") == "config"
    assert classify("429 Too Many Requests") == "transient"
    assert classify("connection reset by peer") == "transient"
    assert classify("The request was refused by the content policy") == "fatal"


def test_clip_and_clip_input_bound_sizes() -> None:
    assert clip("abcdef", 3) == "abc… [3 more characters]"
    assert clip("abc", 3) == "abc"
    assert clip_input({"a": "x" * 10}, cap=5) == {"truncated": '{"a":… [14 more characters]'}
    assert clip_input(None) == {} and clip_input([1]) == {"value": [1]}
