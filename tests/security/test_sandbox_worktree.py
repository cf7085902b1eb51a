"""A git worktree's ``.git`` is a file: the protected-path repair keeps it (it used to remove it as
a file planted in the way of ``.git/hooks``, which broke every git command in the worktree after
one sandboxed call) and still puts it back when a command changed it."""

from __future__ import annotations

from pathlib import Path

from jidocode.shared.sandbox._guard import File, Missing, capture, repair


def _worktree(tmp_path: Path) -> Path:
    wt = tmp_path / "wt"
    wt.mkdir()
    (wt / ".git").write_text("gitdir: /repo/.git/worktrees/wt\n")
    return wt


def test_an_unchanged_git_file_in_the_way_is_kept(tmp_path: Path) -> None:
    wt = _worktree(tmp_path)
    before = capture(str(wt), (".git/hooks", ".git/config"), full=False)
    assert before[".git/hooks"] == Missing()
    assert isinstance(before[".git"], File)
    assert repair(str(wt), before) == []
    assert (wt / ".git").read_text() == "gitdir: /repo/.git/worktrees/wt\n"


def test_a_changed_git_file_is_put_back_and_a_planted_one_removed(tmp_path: Path) -> None:
    wt = _worktree(tmp_path)
    before = capture(str(wt), (".git/hooks",), full=False)
    (wt / ".git").write_text("gitdir: /tmp/evil\n")  # a command redirects git elsewhere
    assert ".git" in repair(str(wt), before)
    assert (wt / ".git").read_text() == "gitdir: /repo/.git/worktrees/wt\n"

    plain = tmp_path / "plain"
    plain.mkdir()
    before = capture(str(plain), (".git/hooks",), full=False)
    assert ".git" not in before
    (plain / ".git").write_text("gitdir: /tmp/evil\n")  # planted where no .git was
    assert ".git" in repair(str(plain), before)
    assert not (plain / ".git").exists()
