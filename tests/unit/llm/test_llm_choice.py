"""The model picked when none is configured (shared/llm_choice.py) and how options use it."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from jidocode.services.conversation.llm.options import resolve_api_key, resolve_options
from jidocode.shared.errors import JidoError
from jidocode.shared.llm_choice import (
    DEFAULT_OLLAMA_URL,
    PROVIDERS,
    choose_model,
    how_to_choose,
    ollama_chat_model,
    ollama_url,
    provider_statuses,
)

ALL_KEYS = [name for p in PROVIDERS for name in p.key_envs]


def test_the_preference_order_is_anthropic_openai_gemini_openrouter() -> None:
    assert [p.name for p in PROVIDERS] == ["anthropic", "openai", "gemini", "openrouter"]
    every = {name: "k" for name in ALL_KEYS}
    picked = choose_model(every, ["llama3:latest"])
    assert picked is not None
    assert (picked.provider, picked.model, picked.api_key_env) == (
        "anthropic",
        "anthropic/claude-sonnet-4-6",
        "ANTHROPIC_API_KEY",
    )
    assert picked.reason == "ANTHROPIC_API_KEY is set"


@pytest.mark.parametrize(
    ("env", "model", "key"),
    [
        ({"OPENAI_API_KEY": "k"}, "openai/gpt-5.4", "OPENAI_API_KEY"),
        ({"GOOGLE_API_KEY": "k"}, "gemini/gemini-2.5-pro", "GOOGLE_API_KEY"),
        ({"GEMINI_API_KEY": "k", "GOOGLE_API_KEY": "k"}, "gemini/gemini-2.5-pro", "GEMINI_API_KEY"),
        ({"OPENROUTER_API_KEY": "k"}, "openrouter/anthropic/claude-sonnet-4.6", "OPENROUTER_API_KEY"),
        (
            {"OPENAI_API_KEY": "  ", "OPENROUTER_API_KEY": "k"},
            "openrouter/anthropic/claude-sonnet-4.6",
            "OPENROUTER_API_KEY",
        ),
    ],
)
def test_each_provider_key_picks_its_default_model(env: dict[str, str], model: str, key: str) -> None:
    picked = choose_model(env)
    assert picked is not None and (picked.model, picked.api_key_env, picked.api_base) == (model, key, None)


def test_ollama_is_picked_last_with_its_first_chat_model_and_its_url() -> None:
    picked = choose_model({"OLLAMA_HOST": "0.0.0.0:11500"}, ["nomic-embed-text:latest", "qwen3:8b"])
    assert picked is not None
    assert picked.settings() == {"model": "ollama_chat/qwen3:8b", "api_base": "http://127.0.0.1:11500"}
    assert choose_model({}, ["nomic-embed-text"]) is None  # only an embedding model: nothing to chat with
    assert choose_model({}, None) is None  # Ollama did not answer
    assert choose_model({}, []) is None


@pytest.mark.parametrize(
    ("env", "url"),
    [
        ({}, DEFAULT_OLLAMA_URL),
        ({"OLLAMA_HOST": "gpu-box"}, "http://gpu-box:11434"),
        ({"OLLAMA_HOST": "https://gpu-box:8443/"}, "https://gpu-box:8443"),
        ({"OLLAMA_HOST": "::"}, "http://127.0.0.1:11434"),
        ({"OLLAMA_HOST": "[::1]:9999"}, "http://[::1]:9999"),
        ({"OLLAMA_HOST": "gpu-box:notaport"}, "http://gpu-box:11434"),
        ({"OLLAMA_HOST": "gpu-box", "OLLAMA_API_BASE": "http://other:1/"}, "http://other:1"),
    ],
)
def test_ollama_url_follows_ollama_host_and_litellms_api_base(env: dict[str, str], url: str) -> None:
    assert ollama_url(env) == url


key_sets = st.sets(st.sampled_from(ALL_KEYS))
listed = st.none() | st.lists(st.sampled_from(["llama3:latest", "all-minilm-embed", "qwen3:8b"]), max_size=3)


@given(keys=key_sets, ollama=listed)
def test_the_pick_is_the_first_usable_row_of_the_table(keys: set[str], ollama: list[str] | None) -> None:
    env = {name: "secret" for name in keys}
    picked = choose_model(env, ollama)
    rows = provider_statuses(env, ollama)
    usable = [r for r in rows if r.usable]
    assert [r.provider for r in rows] == ["anthropic", "openai", "gemini", "openrouter", "ollama"]
    if picked is None:
        assert usable == []
    else:
        assert (usable[0].provider, usable[0].model) == (picked.provider, picked.model)
        # A key travels by name, to its provider's own endpoint; never a value.
        assert "secret" not in repr(picked) and (picked.api_key_env is None) == (picked.provider == "ollama")
        assert (picked.api_base is None) == (picked.provider != "ollama")


@given(keys=key_sets, ollama=listed)
def test_a_key_variable_is_set_exactly_when_a_keyed_provider_is_picked(
    keys: set[str], ollama: list[str] | None
) -> None:
    picked = choose_model({name: "k" for name in keys}, ollama)
    assert (picked is not None and picked.provider != "ollama") == bool(keys)


@given(
    keys=key_sets, model=st.sampled_from(["", "openai/mine"]), base=st.sampled_from(["", "http://mine/v1"])
)
def test_a_configured_model_or_endpoint_always_wins_over_the_pick(
    keys: set[str], model: str, base: str
) -> None:
    env = {name: "k" for name in keys}
    settings = {k: v for k, v in (("model", model), ("api_base", base)) if v}
    picked = choose_model(env)
    if not model and (base or picked is None):
        with pytest.raises(JidoError) as info:
            resolve_options(settings, env, picked=picked)
        assert info.value.type == "llm_not_configured"
        return
    options = resolve_options(settings, env, picked=picked)
    if model:
        assert options.model == "openai/mine" and options.api_key_env is None
    else:  # nothing configured: the pick, with its own key variable and no endpoint of ours
        assert picked is not None and options.model == picked.model
        assert options.api_base is None and resolve_api_key(options, env) == "k"


def test_not_configured_names_every_variable_the_setting_and_its_file() -> None:
    with pytest.raises(JidoError) as info:
        resolve_options({}, {}, settings_file="/home/u/.jido_code/settings.json")
    message = info.value.message
    for name in [*ALL_KEYS, "OLLAMA_HOST", "JIDO_LLM_MODEL", "llm.model", "/home/u/.jido_code/settings.json"]:
        assert name in message
    assert "jidocode models" in message
    assert info.value.details["settings_file"] == "/home/u/.jido_code/settings.json"
    assert how_to_choose("/home/u/.jido_code/settings.json") in message


def test_ollama_chat_model_skips_embedding_models() -> None:
    assert ollama_chat_model(["mxbai-embed-large", "llama3.2"]) == "ollama_chat/llama3.2"
    assert ollama_chat_model([]) is None
