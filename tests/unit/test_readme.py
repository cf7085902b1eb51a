"""The README's promises: two quick-start commands, and a settings example that loads."""

from __future__ import annotations

import re
from pathlib import Path

from jidocode.shared.policy.loader import load_policy
from jidocode.shared.settings import load_settings
from jidocode.shared.trust import trust_project

README = Path(__file__).resolve().parents[2] / "README.md"


def _blocks(lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", README.read_text(), flags=re.S)


def test_quick_start_opens_with_two_commands_that_exist() -> None:
    text = README.read_text()
    assert text.index("## Quick start") < text.index("```bash")
    commands = [line.split("#")[0].strip() for line in _blocks("bash")[0].splitlines() if line.strip()]
    assert commands == ["./dev up", "./dev test"]
    assert (README.parent / "dev").stat().st_mode & 0o111
    assert "./dev test" in (README.parent / ".ci" / "run").read_text()


def test_settings_example_loads_without_diagnostics(tmp_path: Path) -> None:
    [example] = _blocks("json")
    (tmp_path / ".jido").mkdir()
    (tmp_path / ".jido" / "settings.json").write_text(example)
    trust_project(tmp_path, home=tmp_path / "home")  # as after `jidocode projects trust`
    loaded = load_settings(tmp_path, jido_home=tmp_path / "home")
    assert loaded.diagnostics == []
    assert loaded.settings.permissions.allow == ["Read", "Edit(src/**)", "Bash(git status)"]
    load_policy(str(tmp_path), jido_home=tmp_path / "home")  # every rule parses
