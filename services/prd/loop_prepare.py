"""Where a new PRD loop works: the git checks, the worktree and the branch, before its claim.

Git runs in the sandbox (:class:`.git.GitRepo`). A loop works in the project root (one PRD at a
time there) or in its own worktree ``.daedalus/worktrees/<name>`` (parallel PRDs); it checks out
only a branch it creates or one the user names.
"""

from __future__ import annotations

import os
from pathlib import Path

from jidocode.shared.errors import Conflict, InvalidInput, JidoError, PermissionDenied

from . import files
from .config import PrdConfig
from .git import GitRepo
from .loop_rules import HELD
from .model import Prd
from .store import LoopStore, RunOptions, Stored

__all__ = ["prepare"]


async def prepare(
    store: LoopStore,
    project_id: str,
    root: Path,
    prd: Prd,
    options: RunOptions,
    config: PrdConfig,
    previous: Stored | None,
) -> tuple[Path, str, str, str]:
    """The work dir and branch of a new loop, the branch the loop created (``""``: none), and the
    branch it started from (what ``finish`` merges into: the root's branch before the switch;
    a loop run again on its own branch keeps the earlier loop's)."""
    git = GitRepo(str(root), allow_destructive=config.allow_destructive_git)
    if not await git.is_repo():
        raise InvalidInput(
            f"{root} is not a git repository: the PRD loop commits each passed story (it needs "
            "the project's own repository, .git in the project root)",
            details={"root": str(root)},
        )
    branch = options.branch or prd.branch_name
    ours = previous.record.created_branch if previous is not None else ""
    start = await git.current_branch()
    if options.worktree:
        work_dir, branch, ours = await _in_worktree(
            git, root, prd, options, branch or f"prd/{prd.name}", ours
        )
        return work_dir, branch, ours, _base(start, branch, previous)
    await _exclusive(store, project_id, prd.name, root)
    await git.ensure_clean(allow_dirty=options.allow_dirty)
    if branch and start != branch:
        await _trusted_branch(git, branch, options, ours)
        if await git.checkout_branch(branch):
            ours = branch
    branch = branch or start
    return root, branch, ours, _base(start, branch, previous)


def _base(start: str, branch: str, previous: Stored | None) -> str:
    """The branch a loop started from: the root's (``start``), unless the root is already on the
    loop's ``branch`` (a loop of this PRD switched it there) and an earlier loop recorded one."""
    earlier = previous.record.base_branch if previous is not None else ""
    return earlier if start == branch and earlier else start


async def _in_worktree(
    git: GitRepo, root: Path, prd: Prd, options: RunOptions, branch: str, ours: str
) -> tuple[Path, str, str]:
    """The PRD's own worktree: added on ``branch`` when missing, else checked to be ours and clean."""
    work_dir = files.PrdPaths(root, prd.name).worktree
    git.worktree_path(str(work_dir))  # no link on the way (checked again by add_worktree)
    if not work_dir.exists():
        await _trusted_branch(git, branch, options, ours)
        created = await git.add_worktree(str(work_dir), branch)
        return work_dir, branch, branch if created or branch == ours else ""
    tree = git.at(str(work_dir))
    await _own_worktree(tree, root)
    await tree.ensure_clean(allow_dirty=options.allow_dirty)
    return work_dir, branch, ours


async def _own_worktree(tree: GitRepo, root: Path) -> None:
    """``InvalidInput`` unless ``tree`` (an existing ``.daedalus/worktrees/<name>``) is a
    worktree of the root's own repository: a plain directory there would have the loop
    commit to the root's branch, and a ``.git`` file pointing elsewhere to another repository."""
    try:
        ok = os.path.realpath(await tree.toplevel()) == os.path.realpath(tree.work_dir) and (
            os.path.realpath(await tree.common_dir()) == os.path.realpath(root / ".git")
        )
    except JidoError:
        ok = False
    if not ok:
        raise InvalidInput(
            f"{tree.work_dir} exists but is not a git worktree of {root} (remove it to start over)",
            details={"work_dir": tree.work_dir},
        )


async def _trusted_branch(git: GitRepo, branch: str, options: RunOptions, ours: str) -> None:
    """``PermissionDenied`` for an existing branch the user did not name on the command line
    and an earlier loop of this PRD did not create: ``branchName`` comes from ``prd.json``,
    which the agent can edit, so it may name a branch the agent built."""
    if branch == options.branch or branch == ours or not await git.branch_exists(branch):
        return
    raise PermissionDenied(
        f"branch {branch!r} exists and was not created by this PRD's loop: the loop checks out "
        "only a branch it creates or one you name (run with --branch to use it)",
        details={"branch": branch},
    )


async def _exclusive(store: LoopStore, project_id: str, name: str, work_dir: Path) -> None:
    """``Conflict`` when another PRD's loop holds ``work_dir`` (parallel PRDs need worktrees)."""
    for other in await store.records(project_id):
        info = other.record.info
        if info.prd != name and info.state in HELD and Path(info.work_dir) == work_dir:
            raise Conflict(
                f"PRD {info.prd!r} is {info.state} in {work_dir}: run PRDs in parallel only in "
                "separate worktrees (run with worktree)",
                details={"prd": name, "other": info.prd, "work_dir": str(work_dir)},
            )
