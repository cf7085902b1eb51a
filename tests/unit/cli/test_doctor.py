"""`jidocode doctor`: each check says what is wrong and what to do; needed problems exit 1."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from jidocode.cli.doctor import (
    check_data_home,
    check_model,
    check_nats,
    check_python,
    check_system,
    provider_key,
)
from jidocode.cli.main import app


def test_python_older_than_3_11_fails_with_what_to_do() -> None:
    assert check_python()["status"] == "ok"
    old = check_python((3, 10, 4))
    assert old["status"] == "fail" and "3.10.4" in old["detail"] and "3.11" in old["fix"]


def test_the_nats_binary_runs_and_says_its_version() -> None:
    found = check_nats()
    assert found["status"] == "ok" and "v2." in found["detail"]


def test_data_home_missing_is_fine_loose_credentials_fail(tmp_path: Path) -> None:
    assert check_data_home(tmp_path / "new")["status"] == "ok"
    creds = tmp_path / "home" / "credentials"
    creds.mkdir(parents=True, mode=0o700)
    os.chmod(creds, 0o700)
    (creds / "client.json").write_text("{}")
    os.chmod(creds / "client.json", 0o600)
    assert check_data_home(tmp_path / "home")["status"] == "ok"
    os.chmod(creds, 0o755)
    loose = check_data_home(tmp_path / "home")
    assert loose["status"] == "fail" and "0755" in loose["detail"] and "chmod 700" in loose["fix"]
    os.chmod(creds, 0o700)
    os.chmod(creds / "client.json", 0o644)
    assert "client.json" in check_data_home(tmp_path / "home")["detail"]


def test_model_from_env_or_settings_and_whether_the_key_is_set_never_its_value(tmp_path: Path) -> None:
    # Whether the endpoint answers is tests/unit/cli/test_doctor_model.py (here: nothing listens).
    home = tmp_path / "jh"
    home.mkdir()
    dead = "http://127.0.0.1:9/v1"
    none = check_model(home, env={}, probe=lambda url: None)
    assert none["status"] == "warn" and "chat --model" in none["fix"]
    missing = check_model(home, env={"JIDO_LLM_MODEL": "openai/gpt-4.1"})
    assert missing["status"] == "warn" and "OPENAI_API_KEY is not set" in missing["detail"]
    env = {"JIDO_LLM_MODEL": "openai/gpt-4.1", "OPENAI_API_KEY": "sk-secret-value", "OPENAI_BASE_URL": dead}
    asked = check_model(home, env=env)
    assert asked["status"] == "fail" and "OPENAI_API_KEY is set" in asked["detail"]
    assert "sk-secret-value" not in json.dumps(asked)
    (home / "settings.json").write_text(
        json.dumps({"llm": {"model": "openai/x", "api_base": dead, "api_key_env": "MY_KEY"}})
    )
    named = check_model(home, env={})
    assert named["status"] == "warn" and "MY_KEY" in named["detail"] and dead in named["detail"]
    assert "MY_KEY is set" in check_model(home, env={"MY_KEY": "k"})["detail"]
    assert provider_key("claude-sonnet") == "ANTHROPIC_API_KEY" and provider_key("ollama/llama3") is None


def test_system_found_from_the_data_home_file_and_its_services_pinged(
    tmp_path: Path, nats_server: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("NATS_URL", raising=False)
    monkeypatch.setenv("JIDO_DATA_HOME", str(tmp_path / "data"))
    absent = check_system()
    assert absent["status"] == "warn" and "jidocode up" in absent["fix"]
    (tmp_path / "data").mkdir()
    # what `jidocode up` writes while it runs (this process stands in for it)
    (tmp_path / "data" / "up.json").write_text(json.dumps({"pid": os.getpid(), "url": nats_server}))
    found = check_system()
    assert found["status"] == "fail"  # NATS answers, no service does
    assert nats_server in found["detail"] and "not answering: engine" in found["detail"]


async def test_system_ok_when_every_service_answers(
    tmp_path: Path, services: object, nats_server: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import asyncio

    monkeypatch.delenv("NATS_URL", raising=False)
    monkeypatch.setenv("JIDO_DATA_HOME", str(tmp_path / "data"))
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "up.json").write_text(json.dumps({"pid": os.getpid(), "url": nats_server}))
    found = await asyncio.to_thread(check_system)
    assert found["status"] == "ok", found
    assert "conversation" in found["detail"] and "up.json" in found["detail"]


def test_cli_prints_each_problem_with_what_to_do_and_exits_1_on_a_needed_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("NATS_URL", raising=False)
    monkeypatch.setenv("JIDO_CODE_HOME", str(tmp_path / "jh"))
    data = tmp_path / "data"
    (data / "credentials").mkdir(parents=True)
    os.chmod(data / "credentials", 0o755)
    monkeypatch.setenv("JIDO_DATA_HOME", str(data))
    result = CliRunner().invoke(app, ["doctor", "--no-check", "--project", str(tmp_path)])
    assert result.exit_code == 1, result.output
    assert "data home: fail" in result.output and "→ `chmod 700" in result.output
    assert "needed and missing: data home" in result.output
    os.chmod(data / "credentials", 0o700)
    result = CliRunner().invoke(app, ["doctor", "--json", "--no-check", "--project", str(tmp_path)])
    report = json.loads(result.output)
    names = [c["name"] for c in report["checks"]]
    assert names == ["python", "nats", "data home", "disk", "system", "console", "model", "prd", "network"]
    assert report["ok"] is (result.exit_code == 0) and "sandbox" in report
