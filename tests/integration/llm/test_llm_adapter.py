"""The litellm adapter over real HTTP against the scripted server (no patching of litellm)."""

from __future__ import annotations

from typing import Any

import pytest

from jidocode.cli.dev.scripted_llm import Reply, ScriptedLlm, call
from jidocode.services.conversation.llm import make_llm_port
from jidocode.services.conversation.llm.adapter import LitellmPort
from jidocode.services.conversation.ports import LlmRequest, LlmToolSpec
from jidocode.shared.config import Config
from jidocode.shared.errors import JidoError
from jidocode.shared.events import llm as ev
from jidocode.shared.events._base import EventModel

READ = LlmToolSpec(
    name="read_file",
    description="read a file",
    input_schema={"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
)


def _request(settings: dict[str, Any], text: str = "hi", **kw: Any) -> LlmRequest:
    return LlmRequest(
        project_id="p1",
        conversation_id="c1",
        correlation_id="corr-1",
        messages=[{"role": "user", "content": text}],
        settings=settings,
        **kw,
    )


class Collect:
    def __init__(self) -> None:
        self.deltas: list[str] = []
        self.events: list[EventModel] = []

    async def delta(self, piece: str) -> None:
        self.deltas.append(piece)

    async def sink(self, event: EventModel) -> None:
        self.events.append(event)

    def of(self, cls: type[EventModel]) -> list[Any]:
        return [e for e in self.events if isinstance(e, cls)]


async def no_sleep(_: float) -> None:
    return None


async def test_the_streamed_text_reaches_on_delta_in_batches(
    scripted_llm: ScriptedLlm, scripted_llm_settings: dict[str, Any]
) -> None:
    text = "A streamed answer, in many small pieces. " * 10
    pieces = len(text) // 4
    scripted_llm.script(Reply.answer(text, chunk_chars=4))
    got = Collect()
    result = await LitellmPort().complete(_request(scripted_llm_settings), got.delta)
    assert "".join(got.deltas) == result.content == text  # all of it, in order
    assert got.deltas[0] == text[:4]  # the first piece at once
    assert len(got.deltas) < pieces // 2  # then gathered: one message each, not one per piece


async def test_streams_text_and_reports_usage(
    scripted_llm: ScriptedLlm, scripted_llm_settings: dict[str, Any]
) -> None:
    scripted_llm.script(
        Reply.answer("Hello there, friend!", chunk_chars=4, prompt_tokens=11, completion_tokens=5)
    )
    got = Collect()
    port = LitellmPort(sink=got.sink)
    result = await port.complete(_request(scripted_llm_settings), got.delta)
    assert result.content == "Hello there, friend!"
    assert len(got.deltas) >= 2
    assert "".join(got.deltas) == result.content
    assert result.tool_calls == []
    assert result.usage.prompt_tokens == 11
    assert result.usage.completion_tokens == 5
    assert result.usage.total_tokens == 16
    assert result.finish_reason == "stop"
    (usage,) = got.of(ev.LlmCallCompleted)
    assert (usage.project_id, usage.conversation_id, usage.correlation_id) == ("p1", "c1", "corr-1")
    assert usage.total_tokens == 16
    assert usage.cost_usd is None  # litellm has no price for "scripted"
    assert usage.context_window > 0
    body = scripted_llm.requests[0]
    assert body["stream"] is True
    assert body["stream_options"] == {"include_usage": True}
    assert body["messages"] == [{"role": "user", "content": "hi"}]


async def test_assembles_every_streamed_tool_call(
    scripted_llm: ScriptedLlm, scripted_llm_settings: dict[str, Any]
) -> None:
    scripted_llm.script(
        Reply.tools(
            call("read_file", path="src/a.py"),
            call("read_file", path="src/b.py"),
            call("grep", pattern="def main", path="."),
            text="Let me look.",
            chunk_chars=3,
        )
    )
    got = Collect()
    result = await LitellmPort().complete(_request(scripted_llm_settings, tools=[READ]), got.delta)
    assert [(c.name, c.arguments) for c in result.tool_calls] == [
        ("read_file", {"path": "src/a.py"}),
        ("read_file", {"path": "src/b.py"}),
        ("grep", {"pattern": "def main", "path": "."}),
    ]
    assert len({c.id for c in result.tool_calls}) == 3
    assert result.content == "Let me look."
    assert result.finish_reason == "tool_calls"
    sent = scripted_llm.requests[0]["tools"]
    assert sent[0]["function"]["name"] == "read_file"
    assert sent[0]["function"]["parameters"]["required"] == ["path"]


async def test_tool_result_messages_round_trip(
    scripted_llm: ScriptedLlm, scripted_llm_settings: dict[str, Any]
) -> None:
    scripted_llm.script(Reply.answer("The file says hello."))
    messages = [
        {"role": "user", "content": "what does a.txt say?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_9",
                    "type": "function",
                    "function": {"name": "read_file", "arguments": '{"path": "a.txt"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_9", "content": "hello"},
    ]
    request = LlmRequest(
        project_id="p1",
        conversation_id="c1",
        correlation_id="x",
        messages=messages,
        tools=[READ],
        settings=scripted_llm_settings,
    )
    result = await LitellmPort().complete(request, Collect().delta)
    assert result.content == "The file says hello."
    sent = scripted_llm.requests[0]["messages"]
    assert sent[-1] == {"role": "tool", "tool_call_id": "call_9", "content": "hello"}
    assert sent[1]["tool_calls"][0]["id"] == "call_9"


async def test_rate_limit_is_retried_visibly(
    scripted_llm: ScriptedLlm, scripted_llm_settings: dict[str, Any]
) -> None:
    scripted_llm.script(Reply.error(429, retry_after=0), Reply.error(503), Reply.answer("finally"))
    got = Collect()
    seen: list[ev.LlmRetrying] = []

    async def on_retry(notice: ev.LlmRetrying) -> None:
        seen.append(notice)

    result = await LitellmPort(sink=got.sink).complete(
        _request(scripted_llm_settings), got.delta, on_retry=on_retry
    )
    assert result.content == "finally"
    # exactly three HTTP requests: litellm/openai add no hidden retries of their own
    assert len(scripted_llm.requests) == 3
    assert [n.error_type for n in seen] == ["llm_rate_limited", "llm_unavailable"]
    assert [n.attempt for n in seen] == [1, 2]
    assert got.of(ev.LlmRetrying) == seen
    (usage,) = got.of(ev.LlmCallCompleted)
    assert usage.retries == 2


async def test_retries_are_bounded(scripted_llm: ScriptedLlm, scripted_llm_settings: dict[str, Any]) -> None:
    scripted_llm.script(*[Reply.error(500)] * 5)
    got = Collect()
    settings = {**scripted_llm_settings, "max_retries": 2}
    with pytest.raises(JidoError) as info:
        await LitellmPort(sink=got.sink, sleep=no_sleep).complete(_request(settings), got.delta)
    assert info.value.type == "llm_unavailable"
    assert info.value.retryable
    assert len(scripted_llm.requests) == 3
    (failed,) = got.of(ev.LlmCallFailed)
    assert failed.attempts == 3
    assert failed.error_type == "llm_unavailable"


async def test_retry_delays_follow_backoff_and_retry_after(
    scripted_llm: ScriptedLlm, scripted_llm_settings: dict[str, Any]
) -> None:
    scripted_llm.script(
        Reply.error(500), Reply.error(500), Reply.error(429, retry_after=7), Reply.answer("ok")
    )
    slept: list[float] = []

    async def sleep(s: float) -> None:
        slept.append(s)

    settings = {**scripted_llm_settings, "retry_backoff_s": 1.0, "retry_backoff_max_s": 1.5}
    await LitellmPort(sink=None, sleep=sleep).complete(_request(settings), Collect().delta)
    assert slept == [1.0, 1.5, 7.0]


@pytest.mark.parametrize(
    ("reply", "error_type"),
    [
        (Reply.error(401), "llm_auth"),
        (Reply.error(404), "llm_unknown_model"),
        (Reply.context_overflow(), "llm_context_overflow"),
        (Reply.error(400, "bad tool schema"), "llm_bad_request"),
    ],
)
async def test_provider_errors_are_typed_and_not_retried(
    scripted_llm: ScriptedLlm, scripted_llm_settings: dict[str, Any], reply: Reply, error_type: str
) -> None:
    scripted_llm.script(reply, Reply.answer("never reached"))
    with pytest.raises(JidoError) as info:
        await LitellmPort().complete(_request(scripted_llm_settings), Collect().delta)
    assert info.value.type == error_type
    assert not info.value.retryable
    assert len(scripted_llm.requests) == 1


async def test_bad_key_from_api_key_env(monkeypatch: pytest.MonkeyPatch) -> None:
    async with ScriptedLlm(api_key="sk-right") as server:
        settings = {"model": "openai/scripted", "api_base": server.api_base, "api_key_env": "JIDO_TEST_KEY"}
        monkeypatch.setenv("JIDO_TEST_KEY", "sk-wrong")
        with pytest.raises(JidoError) as info:
            await LitellmPort().complete(_request(settings), Collect().delta)
        assert info.value.type == "llm_auth"
        assert "sk-wrong" not in info.value.message
        server.script(Reply.answer("welcome"))
        monkeypatch.setenv("JIDO_TEST_KEY", "sk-right")
        result = await LitellmPort().complete(_request(settings), Collect().delta)
        assert result.content == "welcome"
        assert server.headers[-1]["authorization"] == "Bearer sk-right"


async def test_unset_key_variable_is_llm_auth(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("JIDO_TEST_MISSING_KEY", raising=False)
    settings = {"model": "openai/gpt-4o", "api_key_env": "JIDO_TEST_MISSING_KEY"}
    with pytest.raises(JidoError) as info:
        await LitellmPort().complete(_request(settings), Collect().delta)
    assert info.value.type == "llm_auth" and not info.value.retryable
    assert "JIDO_TEST_MISSING_KEY" in info.value.message


async def test_unset_provider_key_is_llm_auth_not_retried(monkeypatch: pytest.MonkeyPatch) -> None:
    # No api_key_env/api_base: litellm would read OPENAI_API_KEY; unset, the provider SDK's
    # "missing credentials" came back as a 500 and was retried as transient.
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    got = Collect()
    slept: list[float] = []

    async def sleep(delay: float) -> None:
        slept.append(delay)

    port = LitellmPort(sink=got.sink, sleep=sleep)
    with pytest.raises(JidoError) as info:
        await port.complete(_request({"model": "openai/gpt-4o-mini"}), got.delta)
    assert info.value.type == "llm_auth"
    assert not info.value.retryable
    assert "OPENAI_API_KEY" in info.value.message
    assert slept == []
    assert got.of(ev.LlmRetrying) == []
    assert [e.error_type for e in got.of(ev.LlmCallFailed)] == ["llm_auth"]


async def test_no_model_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("JIDO_LLM_MODEL", raising=False)
    got = Collect()
    port = make_llm_port(Config(), sink=got.sink)
    with pytest.raises(JidoError) as info:
        await port.complete(_request({}), got.delta)
    assert info.value.type == "llm_not_configured"
    assert got.of(ev.LlmCallFailed)[0].error_type == "llm_not_configured"


async def test_model_without_provider_is_unknown(scripted_llm: ScriptedLlm) -> None:
    settings = {"model": "no-such-model-xyz"}
    with pytest.raises(JidoError) as info:
        await LitellmPort().complete(_request(settings), Collect().delta)
    assert info.value.type == "llm_unknown_model"
    assert scripted_llm.requests == []


async def test_env_gives_model_and_api_base(
    scripted_llm: ScriptedLlm, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("JIDO_LLM_MODEL", "openai/scripted")
    monkeypatch.setenv("JIDO_LLM_API_BASE", scripted_llm.api_base)
    scripted_llm.script(Reply.answer("from env"))
    result = await LitellmPort().complete(_request({}), Collect().delta)
    assert result.content == "from env"
    assert scripted_llm.requests[0]["model"] == "scripted"


async def test_cost_is_known_for_priced_models(scripted_llm: ScriptedLlm) -> None:
    settings = {"model": "openai/gpt-4o-mini", "api_base": scripted_llm.api_base}
    scripted_llm.script(Reply.answer("cheap", prompt_tokens=1000, completion_tokens=100, cached_tokens=200))
    got = Collect()
    result = await LitellmPort(sink=got.sink).complete(_request(settings), got.delta)
    assert result.usage.cached_tokens == 200
    assert result.usage.cost_usd is not None and result.usage.cost_usd > 0
    assert got.of(ev.LlmCallCompleted)[0].cost_usd == result.usage.cost_usd
    assert got.of(ev.LlmCallCompleted)[0].context_window >= 100_000


async def test_temperature_and_max_tokens_are_sent(
    scripted_llm: ScriptedLlm, scripted_llm_settings: dict[str, Any]
) -> None:
    scripted_llm.script(Reply.answer("ok"))
    settings = {**scripted_llm_settings, "temperature": 0.2, "max_tokens": 64}
    await LitellmPort().complete(_request(settings), Collect().delta)
    body = scripted_llm.requests[0]
    assert body["temperature"] == 0.2
    assert body["max_tokens"] == 64


async def test_timeout_is_retried_then_fails(
    scripted_llm: ScriptedLlm, scripted_llm_settings: dict[str, Any]
) -> None:
    scripted_llm.script(Reply.answer("late", delay_s=5), Reply.answer("on time"))
    settings = {**scripted_llm_settings, "timeout_s": 0.3}
    got = Collect()
    result = await LitellmPort(sink=got.sink, sleep=no_sleep).complete(_request(settings), got.delta)
    assert result.content == "on time"
    assert [n.error_type for n in got.of(ev.LlmRetrying)] == ["llm_timeout"]


class BrokenStore:
    async def record(self, event: ev.LlmCallCompleted) -> ev.UsageTotals:
        raise RuntimeError("ledger down")

    async def conversation(self, project_id: str, conversation_id: str) -> ev.UsageTotals:
        return ev.UsageTotals()

    async def with_subagents(self, project_id: str, conversation_id: str) -> ev.UsageTotals:
        return ev.UsageTotals()

    async def project(self, project_id: str) -> ev.UsageTotals:
        return ev.UsageTotals()


async def test_a_broken_ledger_or_sink_never_loses_the_answer(
    scripted_llm: ScriptedLlm, scripted_llm_settings: dict[str, Any], caplog: pytest.LogCaptureFixture
) -> None:
    async def broken_sink(event: EventModel) -> None:
        raise RuntimeError("bus down")

    scripted_llm.script(Reply.answer("kept"))
    port = LitellmPort(sink=broken_sink, store=BrokenStore())
    result = await port.complete(_request(scripted_llm_settings), Collect().delta)
    assert result.content == "kept"
    await port.flush()
    assert "could not record usage" in caplog.text
    assert "could not publish llm.completed" in caplog.text


class FlakyStore:
    """Records fine, but cannot be read (a ledger in the middle of an election)."""

    def __init__(self) -> None:
        self.totals = ev.UsageTotals()

    async def record(self, event: ev.LlmCallCompleted) -> ev.UsageTotals:
        self.totals = self.totals.model_copy(
            update={
                "calls": self.totals.calls + 1,
                "total_tokens": self.totals.total_tokens + event.total_tokens,
            }
        )
        return self.totals

    async def conversation(self, project_id: str, conversation_id: str) -> ev.UsageTotals:
        raise TimeoutError("no meta leader")

    async def with_subagents(self, project_id: str, conversation_id: str) -> ev.UsageTotals:
        raise TimeoutError("no meta leader")

    async def project(self, project_id: str) -> ev.UsageTotals:
        raise TimeoutError("no meta leader")


async def test_budget_holds_when_the_ledger_cannot_be_read(
    scripted_llm: ScriptedLlm, scripted_llm_settings: dict[str, Any]
) -> None:
    scripted_llm.script(Reply.answer("a", prompt_tokens=90, completion_tokens=20), Reply.answer("b"))
    port = LitellmPort(store=FlakyStore())
    settings = {**scripted_llm_settings, "budget_tokens": 100}
    assert (await port.complete(_request(settings), Collect().delta)).content == "a"
    with pytest.raises(JidoError) as info:
        await port.complete(_request(settings), Collect().delta)
    assert info.value.type == "llm_budget_exceeded"
