"""``jidocode models`` as a user runs it: a real process, a fresh HOME, this shell's keys (issue 25 point 3).

It lists the providers in the order a model is picked, which are usable (keys set, a local
Ollama answering: a stand-in over real HTTP), the model a conversation gets, what the running
conversation service picked, and how to choose; it never prints a key's value and never
imports litellm (the CLI starts fast).
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from jidocode.shared.config import Config
from jidocode.shared.llm_choice import PROVIDERS
from tests.ollama_fake import FakeOllama

SECRET = "sk-must-never-be-printed"
#: Runs the CLI and fails when litellm was imported on the way.
RUN = """
import sys
from jidocode.cli.main import app
try:
    app(args=sys.argv[1:], prog_name="jidocode")
except SystemExit as exit:
    code = exit.code
else:
    code = 0
if "litellm" in sys.modules:
    sys.exit("litellm was imported")
sys.exit(code)
"""


async def _models(home: Path, *args: str, **env: str) -> tuple[int, str, str]:
    keys = {name for p in PROVIDERS for name in p.key_envs}
    base = {k: v for k, v in os.environ.items() if not k.startswith(("JIDO_", "NATS_URL")) and k not in keys}
    base.update(HOME=str(home), JIDO_DATA_HOME=str(home / "data"), COLUMNS="200", **env)
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", RUN, "models", *args, env=base,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await asyncio.wait_for(proc.communicate(), 120)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


@pytest.fixture
async def ollama() -> AsyncIterator[FakeOllama]:
    async with FakeOllama(["all-minilm-embed:latest", "llama3.2:3b"], "hi") as server:
        yield server


async def test_it_lists_the_usable_providers_and_the_model_picked(tmp_path: Path, ollama: FakeOllama) -> None:
    code, out, err = await _models(
        tmp_path, "--json", GOOGLE_API_KEY=SECRET, OPENROUTER_API_KEY=SECRET, OLLAMA_API_BASE=ollama.url
    )
    assert code == 0, err
    report = json.loads(out)
    assert SECRET not in out
    assert report["configured"]["model"] is None
    assert report["picked"] == {
        "provider": "gemini",
        "model": "gemini/gemini-2.5-pro",
        "reason": "GOOGLE_API_KEY is set",
    }
    assert report["model"] == "gemini/gemini-2.5-pro"
    usable = {row["provider"]: row["usable"] for row in report["providers"]}
    assert usable == {"anthropic": False, "openai": False, "gemini": True, "openrouter": True, "ollama": True}
    assert [r["provider"] for r in report["providers"]] == [p.name for p in PROVIDERS] + ["ollama"]
    assert report["providers"][-1]["model"] == "ollama_chat/llama3.2:3b"
    how = report["how_to_choose"]
    assert (how["setting"], how["env"]) == ("llm.model", "JIDO_LLM_MODEL")
    assert how["settings_file"] == str(tmp_path / ".jido_code" / "settings.json")


async def test_with_nothing_usable_it_says_exactly_what_to_set(tmp_path: Path) -> None:
    code, out, err = await _models(tmp_path)
    assert code == 0, err
    assert "configured: none" in out and "no model for a conversation" in out
    flat = " ".join(out.split())
    for name in (
        "ANTHROPIC_API_KEY",
        "OPENAI_API_KEY",
        "GEMINI_API_KEY",
        "OPENROUTER_API_KEY",
        "OLLAMA_HOST",
    ):
        assert name in flat
    assert "JIDO_LLM_MODEL" in flat and str(tmp_path / ".jido_code" / "settings.json") in flat
    assert "not answering" in flat  # the Ollama row (nothing on the conftest's OLLAMA_API_BASE)


async def test_a_configured_model_is_the_one_used_and_the_pick_is_unused(tmp_path: Path) -> None:
    settings = tmp_path / ".jido_code" / "settings.json"
    settings.parent.mkdir()
    settings.write_text(json.dumps({"llm": {"model": "anthropic/claude-opus-4-5"}}))
    code, out, err = await _models(tmp_path, OPENAI_API_KEY=SECRET)
    assert code == 0, err
    flat = " ".join(out.split())
    assert f"configured: anthropic/claude-opus-4-5 (from {settings})" in flat
    assert (
        "picked: openai/gpt-5.4 (OPENAI_API_KEY is set in this shell) (unused: a model is configured)" in flat
    )
    assert "a conversation gets: anthropic/claude-opus-4-5" in flat
    code, out, _ = await _models(tmp_path, "--json", JIDO_LLM_MODEL="openai/mine")
    assert (
        json.loads(out)["configured"]["from"] == "JIDO_LLM_MODEL"
        and json.loads(out)["model"] == "openai/mine"
    )


@pytest.fixture
def services_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """The services start with an Anthropic key (listed before ``services``); the shell has none."""
    monkeypatch.delenv("JIDO_LLM_MODEL", raising=False)
    monkeypatch.setenv("ANTHROPIC_API_KEY", SECRET)


async def test_it_says_what_the_running_conversation_service_picked(
    services_env: None, services: Config, tmp_path: Path
) -> None:
    assert services.nats_url is not None
    env: dict[str, Any] = {"NATS_URL": services.nats_url}
    code, out, err = await _models(tmp_path, "--json", **env)
    assert code == 0, err
    report = json.loads(out)
    assert report["running"] == {
        "state": "answering",
        "picked": "anthropic/claude-sonnet-4-6",
        "because": "ANTHROPIC_API_KEY is set",
    }
    assert report["picked"] is None  # this shell has no key: the service's environment is what counts
    assert report["model"] == "anthropic/claude-sonnet-4-6"
    code, out, err = await _models(tmp_path, **env)
    flat = " ".join(out.split())
    assert "the conversation service picked anthropic/claude-sonnet-4-6 (ANTHROPIC_API_KEY is set)" in flat
    assert "a conversation gets: anthropic/claude-sonnet-4-6" in flat and "no model" not in flat
