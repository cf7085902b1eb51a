"""`jidocode doctor`'s model check says ok only after a real request to the endpoint answered (issue 25 point 7).

Against the scripted OpenAI-compatible server (it lists its models at ``/v1/models``), a
port nothing listens on, and a stand-in Ollama for the model picked when none is configured.
The checks run in a worker thread: they make blocking requests to servers on this event loop.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import sys
from pathlib import Path

import pytest

from jidocode.cli.dev.scripted_llm import ScriptedLlm
from jidocode.cli.doctor import check_model
from jidocode.shared.llm_choice import PROVIDERS
from tests.ollama_fake import FakeOllama

SECRET = "sk-doctor-must-not-print"


@pytest.fixture
def dead_base() -> str:
    """An API base on a loopback port nothing listens on (bound, then closed)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1"


def _no_ollama(_: str) -> None:
    return None


async def _check(home: Path, env: dict[str, str], **kw: object) -> dict[str, object]:
    return await asyncio.to_thread(check_model, home, env, **kw)  # type: ignore[arg-type]


async def test_ok_once_the_scripted_endpoint_answers_and_lists_the_model(
    tmp_path: Path, scripted_llm: ScriptedLlm
) -> None:
    env = {"JIDO_LLM_MODEL": "openai/scripted", "JIDO_LLM_API_BASE": scripted_llm.api_base}
    ok = await _check(tmp_path, env)
    assert ok["status"] == "ok", ok
    assert f"{scripted_llm.api_base}/models answered and lists openai/scripted" in str(ok["detail"])
    other = await _check(tmp_path, {**env, "JIDO_LLM_MODEL": "openai/not-served"})
    assert other["status"] == "warn" and "does not list openai/not-served (it lists scripted)" in str(
        other["detail"]
    )


async def test_a_dead_endpoint_fails_where_it_used_to_say_ok(tmp_path: Path, dead_base: str) -> None:
    (tmp_path / "settings.json").write_text(
        json.dumps({"llm": {"model": "openai/x", "api_base": dead_base, "api_key_env": "MY_KEY"}})
    )
    failed = await _check(tmp_path, {"MY_KEY": SECRET})
    assert failed["status"] == "fail", failed
    assert f"{dead_base}/models did not answer" in str(failed["detail"]) and "MY_KEY is set" in str(
        failed["detail"]
    )
    assert "llm.api_base" in str(failed["fix"]) and SECRET not in json.dumps(failed)


async def test_with_no_model_the_picked_one_is_checked(tmp_path: Path) -> None:
    async with FakeOllama(["qwen3:8b"], "hi") as ollama:
        picked = await _check(tmp_path, {"OLLAMA_API_BASE": ollama.url})
    assert picked["status"] == "ok", picked
    detail = str(picked["detail"])
    assert detail.startswith(f"ollama_chat/qwen3:8b at {ollama.url} (picked: Ollama answers at {ollama.url}")
    assert "lists ollama_chat/qwen3:8b" in detail
    nothing = await _check(tmp_path, {}, probe=_no_ollama)
    assert nothing["status"] == "warn" and "none to pick" in str(nothing["detail"])
    for name in [*(n for p in PROVIDERS for n in p.key_envs), "JIDO_LLM_MODEL", "llm.model"]:
        assert name in str(nothing["fix"])


async def _doctor(home: Path, **env: str) -> tuple[int, dict[str, object]]:
    """``jidocode doctor --json`` as a user runs it (a fresh HOME, no running system)."""
    base = {k: v for k, v in os.environ.items() if not k.startswith(("JIDO_", "NATS_URL"))}
    base.update(HOME=str(home), JIDO_DATA_HOME=str(home / "data"), **env)
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", "from jidocode.cli.main import app; app()", "doctor", "--json", "--no-check",
        env=base, cwd=str(home), stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await asyncio.wait_for(proc.communicate(), 180)
    assert proc.returncode is not None, err
    return proc.returncode, json.loads(out)


async def test_doctor_fails_on_a_dead_model_endpoint_and_passes_the_model_on_a_live_one(
    tmp_path: Path, dead_base: str, scripted_llm: ScriptedLlm
) -> None:
    code, report = await _doctor(tmp_path, JIDO_LLM_MODEL="openai/scripted", JIDO_LLM_API_BASE=dead_base)
    [model] = [c for c in report["checks"] if c["name"] == "model"]  # type: ignore[union-attr]
    assert model["status"] == "fail" and code == 1 and report["ok"] is False
    code, report = await _doctor(
        tmp_path, JIDO_LLM_MODEL="openai/scripted", JIDO_LLM_API_BASE=scripted_llm.api_base
    )
    [model] = [c for c in report["checks"] if c["name"] == "model"]  # type: ignore[union-attr]
    assert model["status"] == "ok", model
