"""The README's promises: two quick-start commands, and a settings example that loads and does
what the text around it says."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from jidocode.shared.policy.decision import Effect, authorize
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


#: What the text before the example promises: read, edit under src/ and `git status` without
#: asking; anything else (another command, an edit outside src/) asked.
PROMISES = [
    ("bash", {"command": "git status"}, Effect.ALLOW),
    ("read_file", {"path": "README.md"}, Effect.ALLOW),
    ("grep", {"pattern": "x", "path": "."}, Effect.ALLOW),
    ("edit_file", {"path": "src/app.py"}, Effect.ALLOW),
    ("bash", {"command": "ls"}, Effect.ASK),
    ("bash", {"command": "git push"}, Effect.ASK),
    ("bash", {"command": "git status; rm -rf src"}, Effect.ASK),
    ("edit_file", {"path": "README.md"}, Effect.ASK),
    ("write_file", {"path": "setup.py"}, Effect.ASK),
]


@pytest.mark.parametrize(("tool", "args", "effect"), PROMISES, ids=[f"{t}:{a}" for t, a, _ in PROMISES])
def test_settings_example_does_what_the_text_says(
    tmp_path: Path, tool: str, args: dict[str, str], effect: Effect
) -> None:
    text = README.read_text()
    assert "edit under `src/` and run `git status` without asking" in text
    assert "asks before anything else (any other command, an edit outside `src/`)" in text
    [example] = _blocks("json")
    (tmp_path / ".jido").mkdir()
    (tmp_path / ".jido" / "settings.json").write_text(example)
    (tmp_path / "src").mkdir()
    (tmp_path / "README.md").write_text("x")
    trust_project(tmp_path, home=tmp_path / "home")
    policy, _ = load_policy(str(tmp_path), jido_home=tmp_path / "home")
    decision = authorize(policy, tool, args)
    assert decision.effect is effect, decision.reason
