"""With no model configured, a model is picked from the provider keys or a local Ollama (issue 25 point 3).

Through the real pieces: every service in this process with the litellm port
calling the scripted server (``OPENAI_BASE_URL`` stands in for OpenAI's own
endpoint, which litellm reads for ``openai/…`` models), and a stand-in Ollama
over real HTTP (its model list and a streamed ``/api/chat`` answer, as Ollama
sends them) for the pick that has no key.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from jidocode.cli.dev.scripted_llm import Reply, ScriptedLlm
from jidocode.client import JidoClient
from jidocode.client._client import TurnFailed
from jidocode.services.conversation.llm import ModelPicker, make_llm_port
from jidocode.services.conversation.ports import LlmRequest
from jidocode.shared.bus import Bus
from jidocode.shared.config import Config
from jidocode.shared.errors import JidoError
from tests.ollama_fake import FakeOllama

KEY = "sk-picked-by-the-test"


def _request(settings: dict[str, Any]) -> LlmRequest:
    return LlmRequest(
        project_id="p1",
        conversation_id="c1",
        correlation_id="corr-1",
        messages=[{"role": "user", "content": "hi"}],
        settings=settings,
    )


async def _nothing(_: str) -> None:
    return None


@pytest.fixture
def openai_key_only(monkeypatch: pytest.MonkeyPatch, scripted_llm: ScriptedLlm) -> ScriptedLlm:
    """Only ``OPENAI_API_KEY`` in the environment the services start in (listed before ``services``)."""
    for name in ("JIDO_LLM_MODEL", "JIDO_LLM_API_BASE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    monkeypatch.setenv("OPENAI_BASE_URL", scripted_llm.api_base)
    return scripted_llm


async def test_a_conversation_with_no_model_uses_the_one_picked_from_the_key(
    openai_key_only: ScriptedLlm, services: Config, bus: Bus, tmp_path: Path
) -> None:
    openai_key_only.script(Reply.answer("picked and answering"))
    client = await JidoClient.connect(project_dir=str(tmp_path), bus=bus, settings={"max_retries": 0})
    try:
        assert await client.send_message("hello") == "picked and answering"
    finally:
        await client.close()
    [body] = openai_key_only.requests
    assert body["model"] == "gpt-5.4"  # openai/gpt-5.4, the documented default of the OpenAI key
    assert openai_key_only.headers[0].get("authorization") == f"Bearer {KEY}"


async def test_the_running_service_says_which_model_it_picked(
    openai_key_only: ScriptedLlm, services: Config, bus: Bus
) -> None:
    info = json.loads((await bus.nc.request("$SRV.INFO.jidocode-conversation", b"", timeout=30)).data)
    assert info["metadata"]["llm_picked"] == "openai/gpt-5.4"
    assert info["metadata"]["llm_picked_because"] == "OPENAI_API_KEY is set"


async def test_no_key_and_no_ollama_fails_the_turn_naming_what_to_set(
    monkeypatch: pytest.MonkeyPatch, services: Config, bus: Bus, tmp_path: Path, jido_home: Path
) -> None:
    monkeypatch.delenv("JIDO_LLM_MODEL", raising=False)
    client = await JidoClient.connect(project_dir=str(tmp_path), bus=bus, settings={"max_retries": 0})
    try:
        with pytest.raises(TurnFailed) as info:
            await client.send_message("hello")
    finally:
        await client.close()
    assert info.value.type == "llm_not_configured"
    for name in (
        "ANTHROPIC_API_KEY",
        "OPENAI_API_KEY",
        "GEMINI_API_KEY",
        "OPENROUTER_API_KEY",
        "OLLAMA_HOST",
    ):
        assert name in info.value.message
    assert str(jido_home / "settings.json") in info.value.message and "llm.model" in info.value.message


@pytest.fixture
async def ollama() -> AsyncIterator[FakeOllama]:
    async with FakeOllama(["nomic-embed-text:latest", "qwen3:8b"], "local answer") as server:
        yield server


async def test_an_ollama_started_after_the_service_answers_the_next_call(
    ollama: FakeOllama, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("JIDO_LLM_MODEL", raising=False)
    env = {"OLLAMA_API_BASE": "http://127.0.0.1:9"}  # nothing there when the service starts
    picker = ModelPicker(env)
    port = make_llm_port(Config(), picker=picker)
    assert await picker.pick() is None
    with pytest.raises(JidoError) as info:
        await port.complete(_request({}), _nothing)
    assert info.value.type == "llm_not_configured"

    env["OLLAMA_API_BASE"] = ollama.url  # Ollama is up now
    result = await port.complete(_request({}), _nothing)
    assert result.content == "local answer"
    assert [c["model"] for c in ollama.chats] == ["qwen3:8b"]  # its first chat model, not the embedding one
    assert picker.describe() == f"ollama_chat/qwen3:8b (Ollama answers at {ollama.url})"


async def test_a_configured_endpoint_is_never_given_the_picked_model(
    ollama: FakeOllama, scripted_llm: ScriptedLlm, scripted_llm_settings: dict[str, Any]
) -> None:
    picker = ModelPicker({"OLLAMA_API_BASE": ollama.url, "ANTHROPIC_API_KEY": KEY})
    port = make_llm_port(Config(), picker=picker)
    assert (await picker.pick()) is not None
    scripted_llm.script(Reply.answer("configured"))
    assert (await port.complete(_request(scripted_llm_settings), _nothing)).content == "configured"
    with pytest.raises(JidoError) as info:  # an endpoint but no model: no pick pairs with it
        await port.complete(_request({"api_base": scripted_llm.api_base}), _nothing)
    assert info.value.type == "llm_not_configured"
    assert ollama.chats == [] and len(scripted_llm.requests) == 1
