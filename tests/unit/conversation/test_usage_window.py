"""The ``usage`` projection: the last call's context fill (pure), its model's window (the shell)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from jidocode.services.conversation.core import initial_state, project, run_to_idle
from jidocode.services.conversation.ports import ContextWindows, LlmRequest, LlmResult, window_of
from jidocode.services.conversation.runtime import with_context_window

from ._helpers import llm_done, user


class _Llm:
    async def complete(self, request: LlmRequest, on_delta: Callable[[str], Awaitable[None]]) -> LlmResult:
        return LlmResult()


class _LlmWithWindows(_Llm):
    def __init__(self) -> None:
        self.asked: list[str] = []

    def context_window(self, model: str) -> int:
        self.asked.append(model)
        return 8000


def _usage_after_two_calls() -> dict[str, Any]:
    state, _ = run_to_idle(initial_state("p", "c"), [user()])
    first = llm_done(state, "one")
    state, _ = run_to_idle(state, [first.model_copy(update={"data": {**first.data, "model": "m-old"}})])
    state, _ = run_to_idle(state, [user("again")])
    second = llm_done(state, "two")
    data = {**second.data, "model": "m-new", "usage": {"prompt_tokens": 100, "completion_tokens": 20}}
    state, _ = run_to_idle(state, [second.model_copy(update={"data": data})])
    used: dict[str, Any] = project(state, "usage")
    return used


def test_usage_names_the_last_calls_model_and_context_fill() -> None:
    used = _usage_after_two_calls()
    assert used["calls"] == 2 and used["prompt_tokens"] == 110
    assert (used["model"], used["context_tokens"], used["context_window"]) == ("m-new", 120, 0)


def test_usage_without_calls_has_no_model() -> None:
    used = project(initial_state("p", "c"), "usage")
    assert (used["model"], used["context_tokens"], used["context_window"]) == (None, 0, 0)


async def test_the_shell_adds_the_window_when_the_port_knows_it() -> None:
    used = _usage_after_two_calls()
    llm = _LlmWithWindows()
    assert isinstance(llm, ContextWindows) and not isinstance(_Llm(), ContextWindows)
    filled = await with_context_window(used, llm)
    assert filled == {**used, "context_window": 8000} and llm.asked == ["m-new"]
    assert used["context_window"] == 0  # the projection itself is not changed
    assert await with_context_window(used, _Llm()) == used
    empty = project(initial_state("p", "c"), "usage")
    assert await with_context_window(empty, llm) == empty and llm.asked == ["m-new"]


async def test_a_ports_window_is_asked_once_per_model() -> None:
    """After every model call the actor needs the model's window: asked of the port once, then known."""
    llm, other = _LlmWithWindows(), _LlmWithWindows()
    assert [await window_of(llm, "m") for _ in range(3)] == [8000, 8000, 8000]
    assert await window_of(llm, "n") == 8000 and llm.asked == ["m", "n"]
    assert await window_of(other, "m") == 8000 and other.asked == ["m"]  # per port
    assert await window_of(_Llm(), "m") == 0 and await window_of(llm, "") == 0
