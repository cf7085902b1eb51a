"""`jidocode projects stop` takes a project id or the project's directory."""

from __future__ import annotations

from pathlib import Path

import pytest

from jidocode.cli.projects import project_to_stop
from jidocode.shared.errors import InvalidInput
from jidocode.shared.events.engine import ProjectInfo


def _info(project_id: str, root: Path) -> ProjectInfo:
    return ProjectInfo(
        project_id=project_id, root_path=str(root.resolve()), started_at="2026-11-28T00:00:00Z"
    )


def test_an_id_is_taken_as_it_is(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert project_to_stop("p-1234", []) == "p-1234"


def test_a_directory_names_the_project_whose_root_it_is(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "proj"
    root.mkdir()
    projects = [_info("p-other", tmp_path / "other"), _info("p-mine", root)]
    assert project_to_stop(str(root), projects) == "p-mine"
    monkeypatch.chdir(root)
    assert project_to_stop(".", projects) == "p-mine"
    monkeypatch.chdir(tmp_path)
    assert project_to_stop("proj", projects) == "p-mine"  # a relative directory that exists


def test_a_directory_with_no_project_is_refused_naming_it(tmp_path: Path) -> None:
    with pytest.raises(InvalidInput) as refused:
        project_to_stop(str(tmp_path / "nowhere"), [_info("p-1", tmp_path)])
    assert str((tmp_path / "nowhere").resolve()) in str(refused.value)
