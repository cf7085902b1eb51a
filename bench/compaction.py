"""The cost of a compaction: tokens before and after, and the time of the summary call.

    python bench/compaction.py [--turns 40] [--result-chars 4000] [--runs 7]

A conversation of ``--turns`` turns (a user message, a tool call whose result has
``--result-chars`` characters, an answer) is built with the pure core, the last call
reporting its real size as the context fill; ``conversation.compact`` then asks for a
summary (keeping the last 2 user turns). The summary call is the shell's own
(``services/conversation/compaction.py``) through the real litellm port against the scripted
OpenAI-compatible server on loopback, which answers with an 800-character summary at once:
the time is JidoCode's and litellm's own overhead, not a model's. Prints the tokens before
and after, the messages summarised and kept, and the median and p90 of the summary call
and of the reducer step that decides the compaction and builds its request.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import time
from typing import Any

os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"

from jidocode.cli.dev.scripted_llm import Reply, ScriptedLlm
from jidocode.services.conversation.compaction import compact, estimate_tokens
from jidocode.services.conversation.core import (
    ConversationState,
    Limits,
    RunCompaction,
    Signal,
    initial_state,
    llm_context,
    run_to_idle,
)
from jidocode.services.conversation.llm.adapter import LitellmPort
from jidocode.shared.events.conversation import CompactionCompleted

T = "2026-01-01T00:00:00Z"


def _signal(
    type_: str, data: dict[str, Any], sid: str, cause: str | None = None, corr: str | None = None
) -> Signal:
    return Signal(
        id=sid, type=type_, source="bench", data=data, correlation_id=corr or sid, causation_id=cause, time=T
    )


def conversation(turns: int, result_chars: int) -> ConversationState:
    state = initial_state("p", "c", Limits(compact_at=0.0, compact_keep_turns=2, max_turns=1000))
    for n in range(turns):
        state, _ = run_to_idle(
            state, [_signal("conversation.user.message", {"text": f"step {n}: look at file {n}"}, f"u{n}")]
        )
        for calls in (1, 0):
            req = state.pending_llm
            assert req is not None
            corr = next(e.correlation_id for e in state.timeline if e.id == req)
            size = estimate_tokens(llm_context(state.timeline))
            data = {
                "request_id": req,
                "content": "" if calls else f"file {n} holds what we need for step {n}.",
                "tool_calls": [{"id": f"c{n}", "name": "read_file", "arguments": {"path": f"f{n}.py"}}]
                if calls
                else [],
                "usage": {"prompt_tokens": size, "completion_tokens": 20},
                "context_window": 1_000_000,
            }
            state, _ = run_to_idle(
                state, [_signal("conversation.llm.completed", data, f"{req}:result", req, corr)]
            )
            if calls:
                call = state.pending_tool_calls[0]
                result = {
                    "request_id": call.request_id,
                    "call_id": call.call_id,
                    "name": call.name,
                    "data": "x" * result_chars,
                }
                state, _ = run_to_idle(
                    state,
                    [
                        _signal(
                            "conversation.tool.completed",
                            result,
                            f"{call.request_id}:result",
                            call.request_id,
                            corr,
                        )
                    ],
                )
    return state


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--turns", type=int, default=40)
    parser.add_argument("--result-chars", type=int, default=4000)
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()

    state = conversation(args.turns, args.result_chars)
    decide: list[float] = []
    intent: RunCompaction | None = None
    for _ in range(args.runs):
        started = time.perf_counter()
        _, intents = run_to_idle(state, [_signal("conversation.compact", {}, "k")])
        decide.append((time.perf_counter() - started) * 1000)
        intent = next(i for i in intents if isinstance(i, RunCompaction))
    assert intent is not None

    port = LitellmPort()
    calls: list[float] = []
    outcome = None
    async with ScriptedLlm() as llm:
        settings = {"model": "openai/scripted", "api_base": llm.api_base, "max_retries": 0}
        for _ in range(args.runs + 1):  # the first one warms litellm up, not counted
            llm.script(Reply.answer("The user works through the files step by step; " * 16))
            started = time.perf_counter()
            outcome = await compact(port, intent, project_id="p", conversation_id="c", settings=settings)
            calls.append((time.perf_counter() - started) * 1000)
    assert isinstance(outcome, CompactionCompleted), outcome
    calls = calls[1:]

    def p90(values: list[float]) -> float:
        return sorted(values)[max(0, int(len(values) * 0.9) - 1)]

    print(f"conversation: {args.turns} turns, tool results of {args.result_chars} characters")
    print(f"context messages summarised / kept: {len(intent.messages)} / {len(intent.kept)}")
    print(
        f"tokens before -> after: {outcome.tokens_before} -> {outcome.tokens_after} "
        f"({100 * outcome.tokens_after / outcome.tokens_before:.1f} %)"
    )
    print(
        f"summary call (litellm -> scripted server), median / p90: {statistics.median(calls):.1f} / {p90(calls):.1f} ms"
    )
    print(
        f"reducer step deciding it (compact -> RunCompaction), median / p90: {statistics.median(decide):.2f} / {p90(decide):.2f} ms"
    )


if __name__ == "__main__":
    asyncio.run(main())
