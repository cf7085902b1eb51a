"""A project that is a git worktree (``.git`` is a file, ``gitdir: …``) under the OS sandbox.

The PRD loop runs stories in worktrees (``.daedalus/worktrees/<name>``). The guard used to
remove that ``.git`` file after every call, as a file "in the way" of the missing
``.git/hooks``: the checkout was cut from its repository, and the next git command in it
found the enclosing repository instead (the loop then committed the worktree's files to the
main branch). Now the file is kept, and a command that changes it gets it put back.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from jidocode.shared.policy import Policy
from tests.security.sandbox_support import MODES, git, make_project, output, sh, skip_unless, write_global


@dataclass
class Worktree:
    root: Path
    gitfile: bytes
    policy: Policy


@pytest.fixture(params=MODES)
def wt(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Worktree:
    mode = request.param
    skip_unless(mode)
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    jido_home = tmp_path / "jido_home"
    write_global(jido_home, {"mode": mode})
    main = make_project(tmp_path / "main")
    git(main, "add", "-A")
    git(main, "-c", "user.name=T", "-c", "user.email=t@x", "commit", "-qm", "init")
    root = tmp_path / "wt"
    git(main, "worktree", "add", "-q", "-b", "story", str(root))
    return Worktree(
        root, (root / ".git").read_bytes(), Policy.build(str(root), jido_home=str(jido_home), home=str(home))
    )


def _branch(root: Path) -> str:
    return subprocess.run(
        ["git", "-C", str(root), "rev-parse", "--abbrev-ref", "HEAD"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()


async def test_a_call_in_a_worktree_keeps_its_git_file(wt: Worktree) -> None:
    # (git itself cannot work in there: the main repository is under the host's /tmp, hidden)
    assert "done" in output(await sh(wt.policy, "echo x > new.txt; echo done"))
    assert (wt.root / ".git").read_bytes() == wt.gitfile
    assert _branch(wt.root) == "story"
    assert "new.txt" in git(wt.root, "status", "--porcelain").stdout


async def test_a_retargeted_git_file_is_put_back(wt: Worktree) -> None:
    await sh(
        wt.policy,
        "mkdir -p evil/hooks; printf '[core]\\n\\tfsmonitor = ./x\\n' > evil/config; "
        "echo 'gitdir: evil' > .git; echo done",
    )
    assert (wt.root / ".git").read_bytes() == wt.gitfile
    assert _branch(wt.root) == "story"


async def test_a_git_directory_in_place_of_the_file_is_undone(wt: Worktree) -> None:
    await sh(
        wt.policy, "rm -f .git; mkdir -p .git/hooks; echo 'touch PWNED' > .git/hooks/pre-commit; echo done"
    )
    assert (wt.root / ".git").is_file() and (wt.root / ".git").read_bytes() == wt.gitfile
    assert _branch(wt.root) == "story"
