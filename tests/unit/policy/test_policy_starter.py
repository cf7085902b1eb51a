"""The starter permissions (decision 0310): reads allowed while no settings say what is allowed;
trusted, the rest asks; untrusted, it is denied; every default names the rule or command to add."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from jidocode.shared.policy import Effect, authorize
from jidocode.shared.policy.loader import load_policy
from jidocode.shared.policy.suggest import bash_rule, named_rule, path_rule
from jidocode.shared.trust import trust_project

READS = [
    ("read_file", {"path": "README.md"}),
    ("list_dir", {"path": "."}),
    ("glob", {"pattern": "**/*.md"}),
    ("grep", {"pattern": "hello"}),
]


def _write(path: Path, value: object) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(value))


@pytest.fixture
def layout(tmp_path: Path) -> tuple[Path, Path]:
    root, home = tmp_path / "proj", tmp_path / "home"
    root.mkdir()
    home.mkdir()
    (root / "README.md").write_text("hello\n")
    return root, home


@pytest.mark.parametrize("trusted", [True, False])
@pytest.mark.parametrize(("tool", "args"), READS)
def test_reads_inside_the_root_are_allowed_without_settings(
    layout: tuple[Path, Path], trusted: bool, tool: str, args: dict[str, str]
) -> None:
    root, home = layout
    if trusted:
        trust_project(root, home=home)
    policy, _ = load_policy(str(root), jido_home=home)
    assert policy.starter and policy.trusted is trusted
    assert authorize(policy, tool, args).effect is Effect.ALLOW


def test_trusted_edits_and_commands_ask_naming_the_rule(layout: tuple[Path, Path]) -> None:
    root, home = layout
    trust_project(root, home=home)
    policy, _ = load_policy(str(root), jido_home=home)
    bash = authorize(policy, "bash", {"command": "npm test -- --watch=false"})
    assert bash.effect is Effect.ASK
    assert 'add "Bash(npm test:*)" to permissions.allow in .jido/settings.json' in bash.reason
    assert bash.details["allow_rule"] == "Bash(npm test:*)"
    edit = authorize(policy, "write_file", {"path": "src/app.py", "content": "x"})
    assert edit.effect is Effect.ASK
    assert 'add "Edit(src/app.py)" to permissions.allow' in edit.reason
    assert authorize(policy, "invoke_skill", {}).effect is Effect.ASK


def test_untrusted_edits_and_commands_are_denied_naming_the_trust_command(layout: tuple[Path, Path]) -> None:
    root, home = layout
    policy, _ = load_policy(str(root), jido_home=home)
    for tool, args in (("bash", {"command": "ls"}), ("edit_file", {"path": "README.md"})):
        decision = authorize(policy, tool, args)
        assert decision.effect is Effect.DENY
        assert (
            f"`jidocode projects trust {os.path.realpath(root)}` lets edits and commands ask"
            in decision.reason
        )


def test_untrusted_reads_stay_inside_the_root(layout: tuple[Path, Path], tmp_path: Path) -> None:
    root, home = layout
    (tmp_path / "secret.txt").write_text("outside\n")
    (root / "link").symlink_to(tmp_path / "secret.txt")
    (root / "up").symlink_to(tmp_path)
    (root / ".env").write_text("KEY=1\n")
    policy, _ = load_policy(str(root), jido_home=home)
    for tool, args in (
        ("read_file", {"path": "../secret.txt"}),
        ("read_file", {"path": str(tmp_path / "secret.txt")}),
        ("read_file", {"path": "link"}),
        ("read_file", {"path": "up/secret.txt"}),
        ("list_dir", {"path": "up"}),
        ("glob", {"pattern": "*", "path": "up"}),
        ("grep", {"pattern": "outside", "path": ".."}),
        ("read_file", {"path": ".env"}),
        ("read_file", {"path": str(home / "trusted_projects.json")}),
    ):
        assert authorize(policy, tool, args).effect is Effect.DENY, (tool, args)


@pytest.mark.parametrize(
    ("permissions", "read", "bash"),
    [
        ({"allow": ["Bash(git status)"]}, Effect.DENY, Effect.DENY),  # the settings say it all
        ({"default": "deny"}, Effect.DENY, Effect.DENY),
        ({"ask": ["Read"]}, Effect.ASK, Effect.DENY),
        ({"deny": ["Read(README.md)"]}, Effect.DENY, Effect.ASK),  # a deny rule keeps the starter
    ],
)
def test_any_allow_ask_or_default_replaces_the_starter(
    layout: tuple[Path, Path], permissions: dict[str, object], read: Effect, bash: Effect
) -> None:
    root, home = layout
    trust_project(root, home=home)
    _write(home / "settings.json", {"permissions": permissions})
    policy, _ = load_policy(str(root), jido_home=home)
    assert authorize(policy, "read_file", {"path": "README.md"}).effect is read
    assert authorize(policy, "bash", {"command": "sleep 1"}).effect is bash


def test_an_untrusted_project_cannot_widen_the_starter(layout: tuple[Path, Path]) -> None:
    root, home = layout
    _write(root / ".jido" / "settings.json", {"permissions": {"allow": ["Bash", "Edit"], "default": "ask"}})
    policy, _ = load_policy(str(root), jido_home=home)
    assert policy.starter and policy.default is Effect.DENY
    assert authorize(policy, "bash", {"command": "ls"}).effect is Effect.DENY
    assert authorize(policy, "read_file", {"path": "README.md"}).effect is Effect.ALLOW


def test_an_untrusted_project_deny_rule_restricts_the_starter(layout: tuple[Path, Path]) -> None:
    root, home = layout
    _write(root / ".jido" / "settings.json", {"permissions": {"deny": ["Read(README.md)"]}})
    policy, _ = load_policy(str(root), jido_home=home)
    assert policy.starter
    assert authorize(policy, "read_file", {"path": "README.md"}).effect is Effect.DENY


@pytest.mark.parametrize(
    ("argv", "rule"),
    [
        (("npm", "test"), "Bash(npm test:*)"),
        (("git", "status", "--short"), "Bash(git status:*)"),
        (("make",), "Bash(make)"),
        (("ls", "-la"), "Bash(ls -la)"),
        (("python", "script.py"), "Bash(python script.py)"),
        (("echo", "a;b"), None),  # would not parse as a rule
        ((), None),
    ],
)
def test_bash_rule(argv: tuple[str, ...], rule: str | None) -> None:
    assert bash_rule(argv) == rule


def test_path_and_named_rules() -> None:
    assert path_rule("edit_file", "/r/src/a.py", "/r") == "Edit(src/a.py)"
    assert path_rule("read_file", "/r/a.py", "/r") == "Read(a.py)"
    assert path_rule("write_file", "/elsewhere/a.py", "/r") is None
    assert path_rule("write_file", "/r/a*.py", "/r") is None
    assert named_rule("mcp__github__create_issue") == "mcp__github__create_issue"
    assert named_rule("bad name") is None
