"""`jidocode doctor` names the settings that have no effect (seed 001 ``signal_bus``, a hook's ``bus``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from jidocode.cli.doctor import MAX_SETTINGS_LINES, check_settings
from jidocode.cli.main import app
from jidocode.shared.trust import trust_project

LOGGER = {"module": "JidoSignal.Bus.Middleware.Logger", "opts": {"level": "debug"}}


def _settings(folder: Path, value: object) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "settings.json").write_text(json.dumps(value))


def test_clean_settings_are_ok(tmp_path: Path) -> None:
    _settings(tmp_path / "home", {"signal_bus": {"name": "jido_code_bus", "middleware": []}})
    found = check_settings(None, jido_home=tmp_path / "home")
    assert found["status"] == "ok" and "no problems" in found["detail"]


def test_the_logger_middleware_and_a_hook_bus_are_warned_with_file_and_key(tmp_path: Path) -> None:
    home, root = tmp_path / "home", tmp_path / "proj"
    _settings(home, {"signal_bus": {"middleware": [LOGGER]}})
    _settings(root / ".jido", {"hooks": {"post": {"signal_type": "skill/post", "bus": ":audit"}}})
    trust_project(root, home=home)
    found = check_settings(str(root), jido_home=home)
    assert found["status"] == "warn" and "2 problem(s)" in found["detail"]
    assert [d["key"] for d in found["diagnostics"]] == ["signal_bus.middleware[0]", "hooks.post.bus"]
    middleware, hook = found["lines"]
    assert str(home / "settings.json") in middleware and "not supported" in middleware
    assert "jidocode watch" in middleware
    assert str(root / ".jido" / "settings.json") in hook and "':audit'" in hook


def test_lines_are_capped_and_the_rest_counted(tmp_path: Path) -> None:
    many = [{"module": f"M{i}"} for i in range(MAX_SETTINGS_LINES + 5)]
    _settings(tmp_path / "home", {"signal_bus": {"middleware": many}})
    found = check_settings(None, jido_home=tmp_path / "home")
    assert len(found["diagnostics"]) == MAX_SETTINGS_LINES + 5
    assert len(found["lines"]) == MAX_SETTINGS_LINES + 1
    assert found["lines"][-1].startswith("… and 5 more")


def test_the_cli_prints_them_and_they_do_not_fail_the_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("NATS_URL", raising=False)
    monkeypatch.setenv("JIDO_CODE_HOME", str(tmp_path / "jh"))
    monkeypatch.setenv("JIDO_DATA_HOME", str(tmp_path / "data"))
    _settings(tmp_path / "jh", {"signal_bus": {"middleware": [LOGGER]}})
    result = CliRunner().invoke(app, ["doctor", "--no-check", "--project", str(tmp_path)])
    assert "settings:  warn" in result.output, result.output
    assert "signal_bus.middleware[0]" in result.output and "not supported" in result.output
    assert "settings" not in result.output.partition("needed and missing:")[2]  # a warning, never needed
    result = CliRunner().invoke(app, ["doctor", "--json", "--no-check", "--project", str(tmp_path)])
    report = json.loads(result.output)
    assert report["settings_check"]["status"] == "warn"
    assert [d["key"] for d in report["settings_check"]["diagnostics"]] == ["signal_bus.middleware[0]"]
    assert "settings" not in [c["name"] for c in report["checks"] if c["status"] == "fail"]
