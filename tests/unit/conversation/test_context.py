"""The incremental ``llm_context`` equals the whole-timeline definition, entry by entry."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from jidocode.services.conversation.core import Emit, RunLlm, Signal, Timeline, initial_state, run_to_idle
from jidocode.services.conversation.core.context import NO_RESULT, ContextBuilder, llm_context
from jidocode.shared.events.conversation import (
    AssistantMessage,
    ConversationError,
    LlmRequested,
    ToolCallCompleted,
    ToolCallFailed,
    ToolCallRequested,
    UserMessage,
)

from ._helpers import calls, llm_done, tool_done, user
from .test_reducer_properties import Action, actions, drive, limits


def reference(entries: Sequence[Signal]) -> list[dict[str, Any]]:
    """The definition: two passes over the whole timeline (what the builder must equal)."""

    def content(result: Signal | None) -> str:
        if result is None:
            return NO_RESULT
        if result.type == ToolCallFailed.TYPE:
            return f"error ({result.data.get('error_type')}): {result.data.get('message')}"
        data = result.data.get("data")
        return (
            data
            if isinstance(data, str)
            else json.dumps(data, sort_keys=True, ensure_ascii=False, default=str)
        )

    results: dict[str, Signal] = {}
    groups: dict[str, list[Signal]] = {}
    texts: dict[str, str] = {}
    for entry in entries:
        if entry.type in (ToolCallCompleted.TYPE, ToolCallFailed.TYPE):
            results.setdefault(str(entry.data["request_id"]), entry)
        elif entry.type == ToolCallRequested.TYPE:
            groups.setdefault(str(entry.data["llm_request_id"]), []).append(entry)
        elif entry.type == AssistantMessage.TYPE:
            texts.setdefault(str(entry.data["request_id"]), str(entry.data["text"]))
    messages: list[dict[str, Any]] = []
    opened: set[str] = set()
    for entry in entries:
        if entry.type == UserMessage.TYPE:
            messages.append({"role": "user", "content": entry.data["text"]})
            continue
        if entry.type == LlmRequested.TYPE:
            llm_id = entry.id
        elif entry.type == AssistantMessage.TYPE:
            llm_id = str(entry.data["request_id"])
        elif entry.type == ToolCallRequested.TYPE:
            llm_id = str(entry.data["llm_request_id"])
        else:
            continue
        if llm_id in opened or (llm_id not in texts and llm_id not in groups):
            continue
        opened.add(llm_id)
        group = groups.get(llm_id, [])
        message: dict[str, Any] = {"role": "assistant", "content": texts.get(llm_id)}
        if group:
            message["tool_calls"] = [
                {
                    "id": c.data["call_id"],
                    "type": "function",
                    "function": {
                        "name": c.data["name"],
                        "arguments": json.dumps(c.data.get("args", {}), sort_keys=True),
                    },
                }
                for c in group
            ]
        messages.append(message)
        for c in group:
            messages.append(
                {
                    "role": "tool",
                    "tool_call_id": c.data["call_id"],
                    "name": c.data["name"],
                    "content": content(results.get(c.id)),
                }
            )
    return messages


_ids = st.sampled_from(["a", "b", "c", "d", "e"])
_entries = st.lists(
    st.one_of(
        st.builds(lambda i, text: (UserMessage.TYPE, i, {"text": text}), _ids, st.text(max_size=3)),
        st.builds(lambda i: (LlmRequested.TYPE, i, {"turn": 1}), _ids),
        st.builds(
            lambda i, r, text: (AssistantMessage.TYPE, i, {"text": text, "request_id": r}),
            _ids,
            _ids,
            st.text(max_size=3),
        ),
        st.builds(
            lambda i, r, n: (
                ToolCallRequested.TYPE,
                i,
                {"call_id": f"k{n}", "name": f"t{n}", "args": {"n": n}, "llm_request_id": r},
            ),
            _ids,
            _ids,
            st.integers(0, 3),
        ),
        st.builds(
            lambda i, r, data: (
                ToolCallCompleted.TYPE,
                i,
                {"request_id": r, "call_id": "k", "name": "t", "data": data},
            ),
            _ids,
            _ids,
            st.one_of(st.text(max_size=3), st.dictionaries(st.text(max_size=2), st.integers(), max_size=2)),
        ),
        st.builds(
            lambda i, r: (
                ToolCallFailed.TYPE,
                i,
                {"request_id": r, "call_id": "k", "name": "t", "error_type": "e", "message": "m"},
            ),
            _ids,
            _ids,
        ),
        st.builds(lambda i: (ConversationError.TYPE, i, {"error_type": "e", "message": "m"}), _ids),
    ),
    max_size=40,
)


def _signals(raw: list[tuple[str, str, dict[str, Any]]]) -> list[Signal]:
    return [Signal(id=i, type=t, source="t", data=d, correlation_id=i) for t, i, d in raw]


@settings(max_examples=300, deadline=None)
@given(_entries)
def test_incremental_context_equals_the_definition_after_every_entry(
    raw: list[tuple[str, str, dict[str, Any]]],
) -> None:
    """Any sequence, even one the reducer never makes (answers before requests, results before calls)."""
    entries = _signals(raw)
    timeline = Timeline()
    handed_out: list[tuple[list[dict[str, Any]], Any]] = []
    for n, entry in enumerate(entries, 1):
        timeline = timeline.append(entry)
        context = llm_context(timeline)
        assert context == reference(entries[:n]) == llm_context(entries[:n])
        handed_out.append((context, json.loads(json.dumps(context))))
    # the messages handed out earlier never changed afterwards
    for context, copy in handed_out:
        assert context == copy


@settings(max_examples=150, deadline=None)
@given(actions, limits)
def test_every_llm_request_carries_the_context_of_its_prefix(acts: list[Action], lim: Any) -> None:
    state, _, intents = drive(acts, lim)
    emitted = [i.entry for i in intents if isinstance(i, Emit)]
    for intent in intents:
        if isinstance(intent, RunLlm):
            upto = next(n for n, e in enumerate(emitted, 1) if e.id == intent.request_id)
            assert list(intent.messages) == reference(emitted[:upto])
    assert llm_context(state.timeline) == reference(list(state.timeline))


def test_an_older_state_keeps_its_own_context() -> None:
    old, _ = run_to_idle(initial_state("p", "c"), [user("one", id="u1")])
    before = llm_context(old.timeline)
    new, _ = run_to_idle(old, [llm_done(old, "", calls("read"))])
    new, _ = run_to_idle(new, [tool_done(new, 0)])
    assert llm_context(old.timeline) == before == [{"role": "user", "content": "one"}]
    assert [m["role"] for m in llm_context(new.timeline)] == ["user", "assistant", "tool"]


def test_each_request_feeds_the_builder_only_the_new_entries(monkeypatch: Any) -> None:
    """A long conversation costs the next LLM request what its new entries cost, not the history."""
    fed: list[str] = []
    original = ContextBuilder.add

    def counting(self: ContextBuilder, entry: Signal) -> None:
        fed.append(entry.id)
        original(self, entry)

    monkeypatch.setattr(ContextBuilder, "add", counting)
    state = initial_state("p", "c")
    for i in range(200):
        state, _ = run_to_idle(state, [user(f"m{i}", id=f"u{i}")])
        state, _ = run_to_idle(state, [llm_done(state, f"answer {i}")])
    assert len(state.timeline) == 1000  # user, request, result, answer, turn end
    assert len(fed) == len(set(fed)) <= len(state.timeline)
