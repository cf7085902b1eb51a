"""The policy from settings.json layers: project over global, bad rules are errors, reload on change."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from jidocode.shared.errors import InvalidInput
from jidocode.shared.policy import Effect, authorize
from jidocode.shared.policy.loader import PolicyCache, load_policy
from jidocode.shared.trust import trust_project


def _write(path: Path, value: object) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(value))


@pytest.fixture
def layout(tmp_path: Path) -> tuple[Path, Path]:
    root, home = tmp_path / "proj", tmp_path / "home"
    root.mkdir()
    home.mkdir()
    trust_project(root, home=home)  # these tests are about the project layer in full
    return root, home


def test_project_layer_overrides_global(layout: tuple[Path, Path]) -> None:
    root, home = layout
    _write(home / "settings.json", {"permissions": {"allow": ["Bash(git:*)"]}, "tools": {"timeout_s": 5}})
    _write(root / ".jido" / "settings.json", {"permissions": {"allow": ["Read"]}})
    policy, tools = load_policy(str(root), jido_home=home)
    assert [r.raw for r in policy.allow] == ["Read"]  # lists are replaced, not merged
    assert tools.timeout_s == 5
    assert authorize(policy, "bash", {"command": "git status"}).effect is Effect.DENY


def test_global_home_is_protected(layout: tuple[Path, Path]) -> None:
    root, home = layout
    policy, _ = load_policy(str(root), jido_home=home)
    assert policy.sandbox.jido_home == os.path.realpath(home)


@pytest.mark.parametrize(
    ("permissions", "fragment"),
    [
        ({"allow": ["Bash(git:*"]}, "unbalanced parentheses"),
        ({"deny": ["Bash()"]}, "empty pattern"),
        ({"allow": "Read"}, "permissions.allow"),
        ({"default": "allow"}, "permissions.default"),
    ],
)
def test_bad_permissions_are_a_clear_error(
    layout: tuple[Path, Path], permissions: object, fragment: str
) -> None:
    root, home = layout
    _write(root / ".jido" / "settings.json", {"permissions": permissions})
    with pytest.raises(InvalidInput, match=fragment.replace("(", r"\(")) as exc:
        load_policy(str(root), jido_home=home)
    assert "settings.json" in exc.value.message


def test_cache_rebuilds_when_a_settings_file_changes(layout: tuple[Path, Path]) -> None:
    root, home = layout
    cache = PolicyCache(home)
    first, _ = cache.get("p1", str(root), ".jido")
    assert cache.get("p1", str(root), ".jido")[0] is first
    _write(root / ".jido" / "settings.json", {"permissions": {"allow": ["Read"]}})
    second, _ = cache.get("p1", str(root), ".jido")
    assert second is not first and [r.raw for r in second.allow] == ["Read"]
