"""The trust store (``<global home>/trusted_projects.json``) and `jidocode projects trust|untrust`."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest
from typer.testing import CliRunner

from jidocode.cli.main import app
from jidocode.shared.errors import InvalidInput
from jidocode.shared.settings import load_settings
from jidocode.shared.trust import (
    TRUST_FILE,
    trust_project,
    trust_state,
    trusted_projects,
    untrust_project,
)

runner = CliRunner()


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "jido_home"
    monkeypatch.setenv("JIDO_CODE_HOME", str(path))
    return path


def test_trust_is_keyed_by_realpath_and_covers_subdirectories(tmp_path: Path, home: Path) -> None:
    real = tmp_path / "code" / "app"
    (real / "sub").mkdir(parents=True)
    link = tmp_path / "link"
    link.symlink_to(real)
    state = trust_project(link, home=home)
    assert state.trusted and state.root == str(real.resolve())
    stored = json.loads((home / TRUST_FILE).read_text())
    assert list(stored["projects"]) == [str(real.resolve())]
    assert stat.S_IMODE(os.stat(home / TRUST_FILE).st_mode) == 0o600
    assert trust_state(real / "sub", home=home).via == str(real.resolve())
    assert not trust_state(tmp_path / "code", home=home).trusted  # a parent is not covered
    assert not trust_state(tmp_path / "code" / "app-evil", home=home).trusted  # nor a sibling prefix


def test_untrust_removes_only_the_own_entry(tmp_path: Path, home: Path) -> None:
    parent, child = tmp_path / "p", tmp_path / "p" / "c"
    child.mkdir(parents=True)
    trust_project(parent, home=home)
    trust_project(child, home=home)
    assert untrust_project(child, home=home).via == str(parent.resolve())  # still trusted through p
    assert not untrust_project(parent, home=home).trusted
    assert trusted_projects(home=home) == []


def test_too_wide_or_missing_roots_are_refused(tmp_path: Path, home: Path) -> None:
    for root in ("/", str(Path.home()), str(tmp_path / "missing")):
        with pytest.raises(InvalidInput):
            trust_project(root, home=home)
    assert not (home / TRUST_FILE).exists()


def test_a_store_inside_the_project_means_nothing(tmp_path: Path, home: Path) -> None:
    root = tmp_path / "repo"
    for place in (root, root / ".jido", root / ".jido_code"):
        place.mkdir(parents=True, exist_ok=True)
        (place / TRUST_FILE).write_text(json.dumps({"version": 1, "projects": {str(root): {}}}))
    (root / ".jido" / "settings.json").write_text('{"permissions": {"allow": ["Bash"]}}')
    assert not trust_state(root, home=home).trusted
    assert load_settings(root).settings.permissions.allow == []


def test_unreadable_store_is_not_overwritten(tmp_path: Path, home: Path) -> None:
    home.mkdir()
    (home / TRUST_FILE).write_text("[1, 2]")
    state = trust_state(tmp_path, home=home)
    assert not state.trusted and state.problem
    with pytest.raises(InvalidInput):
        trust_project(tmp_path, home=home)
    assert (home / TRUST_FILE).read_text() == "[1, 2]"


def test_cli_trust_list_untrust(tmp_path: Path, home: Path) -> None:
    root = tmp_path / "repo"
    (root / ".jido").mkdir(parents=True)
    (root / ".jido" / "settings.json").write_text('{"permissions": {"allow": ["Bash"]}}')
    result = runner.invoke(app, ["projects", "trust", str(root)])
    assert result.exit_code == 0, result.output
    assert "trusted" in result.output and "permissions.allow" in result.output  # what now applies
    assert load_settings(root).settings.permissions.allow == ["Bash"]
    listed = runner.invoke(app, ["projects", "trust", "--list", "--json"])
    assert [e["root"] for e in json.loads(listed.output)] == [str(root.resolve())]
    result = runner.invoke(app, ["projects", "untrust", str(root), "--json"])
    assert result.exit_code == 0 and json.loads(result.output)["trusted"] is False
    assert load_settings(root).settings.permissions.allow == []
    assert "no trusted project roots" in runner.invoke(app, ["projects", "trust", "--list"]).output


def test_cli_trust_refuses_the_filesystem_root(home: Path) -> None:
    result = runner.invoke(app, ["projects", "trust", "/"])
    assert result.exit_code == 2
    assert not (home / TRUST_FILE).exists()
    assert runner.invoke(app, ["projects", "trust"]).exit_code == 2  # neither a directory nor --list
