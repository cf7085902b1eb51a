"""The git service (seed 004): cleanliness, commits of passed stories, the optional branch and worktree.

STUB (interface fixed; the ``prd-gitq`` branch implements it). Every git command is an argv
(never a shell line) with the sandbox's pinned configuration (no repository hooks, pager,
editor, credential helper); model text only ever reaches git as one argv item or via stdin.
Errors are ``jidocode.shared.errors.Conflict`` (dirty tree, branch in use) or ``InvalidInput``.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Commit", "GitRepo"]


@dataclass(frozen=True)
class Commit:
    sha: str
    message: str
    files: list[str]


class GitRepo:
    def __init__(self, work_dir: str, *, allow_destructive: bool = False) -> None:
        self.work_dir = work_dir
        self.allow_destructive = allow_destructive

    async def is_repo(self) -> bool:
        raise NotImplementedError

    async def dirty_files(self, *, ignore: tuple[str, ...] = (".daedalus/",)) -> list[str]:
        """Uncommitted changes (tracked and untracked), outside ``ignore``."""
        raise NotImplementedError

    async def ensure_clean(self, *, allow_dirty: bool = False) -> None:
        """``Conflict`` naming the changed files unless the tree is clean or ``allow_dirty``."""
        raise NotImplementedError

    async def current_branch(self) -> str:
        raise NotImplementedError

    async def checkout_branch(self, branch: str, *, create: bool = True) -> None:
        raise NotImplementedError

    async def commit_all(self, message: str, *, exclude: tuple[str, ...] = (".daedalus/",)) -> Commit | None:
        """Stage every change outside ``exclude`` and commit it (``None``: nothing to commit)."""
        raise NotImplementedError

    async def add_worktree(self, path: str, branch: str) -> None:
        """``git worktree add`` at ``path`` on ``branch`` (created from HEAD when missing)."""
        raise NotImplementedError

    async def remove_worktree(self, path: str, *, force: bool = False) -> None:
        """Refused with changes in it unless ``force`` and ``allow_destructive`` (``PermissionDenied``)."""
        raise NotImplementedError
