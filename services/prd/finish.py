"""Finishing a PRD (issue 28 point 3, decision 0337): merge its branch into the branch its loop
started from, remove its worktree, push.

The steps, each refusing before anything changes when it can::

    1. which branches: the loop's ``branch`` into ``FinishPrd.into``, else the loop's
       ``base_branch`` (recorded when it started), else, for a worktree loop, the root's branch;
    2. where a push goes (``--push``): the remote's URL, a local bare repository, or an HTTP
       remote the egress rules let the push reach (:mod:`.gitpush`, decision 0343);
    3. the checks, on refs only: the worktree is clean; the root is clean outside ``.daedalus/``;
       the branch changes no protected path (``.jido``, ``.github/workflows`` …: a merge would
       write them into the user's checkout, as a checkout would); the merge has no conflict
       (``Conflict`` naming the files);
    4. the root on ``into`` (switched back from the PRD's branch when the loop worked there);
    5. ``git merge``: a fast-forward, else a merge commit; nothing when ``into`` has it all;
    6. the worktree removed (``git worktree remove``: refused with changes in it);
    7. the push.

A failure after 5 leaves the merge in place and says which step failed. The pure parts
(:func:`merge_into`, :func:`remote_path`, :func:`merge_message`) are table-tested.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Literal
from urllib.parse import unquote, urlsplit

from jidocode.shared import sandbox
from jidocode.shared.egress import CallScope
from jidocode.shared.errors import Conflict, InvalidInput, NotFound, PermissionDenied
from jidocode.shared.events.prd import FinishPrd, LoopInfo, PrdFinished
from jidocode.shared.nofollow import open_dir, open_read, replace_bytes

from . import files
from .config import PrdConfig
from .egress import PushNetwork
from .gitfinish import FinishingRepo
from .gitpush import NetworkRemote, auth_header, is_network, network_remote
from .gitrun import protected_changes
from .gittext import SUBJECT_MAX, one_line, shown_list
from .model import Prd
from .store import LoopRecord

__all__ = [
    "Finish",
    "PushTarget",
    "finish_prd",
    "merge_into",
    "merge_message",
    "put_back",
    "remote_path",
    "root_in_use",
    "set_aside",
    "validate_remote",
]

#: How ``into`` took the branch (``PrdFinished.merge``).
MergeKind = Literal["fast_forward", "merge_commit", "up_to_date"]
_REMOTE_NAME: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")
#: ``[user@]host:path``: git's scp-like address (a colon before any slash).
_SCP_LIKE: Final = re.compile(r"^[^/:]+:")
#: States of a loop that holds its branch and worktree (``finish`` waits for stop).
_HELD: Final = frozenset({"ready", "running", "paused"})
#: Where the PRD files live (untracked in the root when a worktree's branch commits them).
DAEDALUS: Final = ".daedalus/"
#: The largest untracked file of ``.daedalus/`` set aside for a merge (``progress.md`` rotates at 2 MiB).
MAX_SET_ASIDE_BYTES: Final = 8 * 1024 * 1024


@dataclass(frozen=True)
class PushTarget:
    """Where ``--push`` goes: the remote's name and URL, and either the local bare repository's
    path or the HTTP remote with its pass's scope and its token's header (``""``: none)."""

    remote: str
    url: str
    bare: str = ""
    network: NetworkRemote | None = None
    scope: CallScope | None = None
    header: str = ""


@dataclass(frozen=True)
class Finish:
    """What ``finish`` works on: the PRD's branch, the branch it goes into, its worktree (``""``
    when the loop worked in the root)."""

    branch: str
    into: str
    worktree: str


def validate_remote(name: str) -> str:
    """``name`` when it is a plain remote name (no option look-alike, no path), else ``InvalidInput``."""
    if not _REMOTE_NAME.fullmatch(name) or ".." in name:
        raise InvalidInput(
            f"{name!r} is not a remote name (letters, digits, '.', '_', '-')", details={"remote": name}
        )
    return name


def merge_into(cmd: FinishPrd, record: LoopRecord | None, root_branch: str) -> str:
    """The branch the PRD's branch goes into: the one asked, else the one its loop started from,
    else (a worktree loop of an older record) the branch the root is on."""
    if cmd.into:
        return cmd.into
    if record is not None and record.base_branch:
        return record.base_branch
    if record is not None and record.options.worktree and root_branch:
        return root_branch
    raise InvalidInput(
        f"it is not known which branch PRD {cmd.name!r} started from: name it (finish --into <branch>)",
        details={"prd": cmd.name},
    )


def merge_message(prd: Prd, branch: str) -> str:
    """The merge commit's subject: ``Merge PRD <name> (<branch>): <title>``, one line of at most 72."""
    subject = one_line(f"Merge PRD {prd.name} ({branch})" + (f": {prd.title}" if prd.title else ""))
    return subject if len(subject) <= SUBJECT_MAX else subject[: SUBJECT_MAX - 1].rstrip() + "…"


def remote_path(url: str, root: str) -> str:
    """The absolute path of a local remote (a path, relative ones from ``root``, or ``file://``).

    A network remote (``https://``, ``ssh://``, ``git://``, ``host:path`` …) is
    ``PermissionDenied`` here (:mod:`.gitpush` takes an HTTP one when the service has a proxy);
    so is a transport program (``ext::``) and a path that holds the project or is the file
    system's root."""
    parts = urlsplit(url)
    if parts.scheme == "file":
        path = unquote(parts.path)
    elif "::" in url or (parts.scheme and len(parts.scheme) > 1) or _SCP_LIKE.match(url):
        host = parts.hostname or url.split("::", 1)[0].split(":", 1)[0].rpartition("@")[2]
        raise PermissionDenied(
            f"the remote {url!r} is reached over the network ({host or 'a transport program'}): "
            "the PRD service's git runs in the sandbox without network, so finish pushes only to "
            "a local bare repository; push this one yourself (git push)",
            details={"url": url, "host": host},
        )
    else:
        path = url
    where = os.path.normpath(os.path.join(root, os.path.expanduser(path)))
    if os.path.commonpath([where, root]) in (where, root):
        raise PermissionDenied(
            f"the remote {where} holds the project {root} or lies in it: a push writes only into "
            "a bare repository beside the project",
            details={"url": url},
        )
    return where


def root_in_use(others: Iterable[LoopInfo], root: Path) -> None:
    """``Conflict`` when another PRD's loop holds the project root: the merge happens there."""
    for info in others:
        if info.state in _HELD and Path(info.work_dir) == root:
            raise Conflict(
                f"PRD {info.prd!r} is {info.state} in the project root {root}: finish merges there, "
                "so wait for that loop to end or stop it",
                details={"other": info.prd, "state": info.state},
            )


async def finish_prd(
    project_id: str,
    root: Path,
    prd: Prd,
    cmd: FinishPrd,
    record: LoopRecord | None,
    config: PrdConfig,
    *,
    others: Iterable[LoopInfo] = (),
    network: PushNetwork | None = None,
) -> PrdFinished:
    """Finish PRD ``cmd.name`` of the project at ``root`` (the module's steps); ``others``: the
    loops of the project's other PRDs (one holding the root is ``Conflict``); ``network``: how a
    push reaches an HTTP remote (``None``: such a remote is refused)."""
    root_in_use(others, root)
    if record is None:
        raise NotFound(f"PRD {cmd.name!r} never ran: it has no branch to finish", details={"prd": cmd.name})
    state = record.info.state
    if state in _HELD:
        raise Conflict(
            f"the loop of PRD {cmd.name!r} is {state}: stop it before finishing (jidocode prd stop)",
            details={"prd": cmd.name, "state": state},
        )
    repo = FinishingRepo(str(root), allow_destructive=config.allow_destructive_git)
    job = await _what(repo, root, cmd, record)
    target = await _push_target(repo, cmd, job.into, config, network, project_id) if cmd.push else None
    await _check(repo, job)
    merge, commit = await _merge(repo, prd, job)
    if job.worktree:
        await repo.remove_worktree(job.worktree)
    pushed_to = remote_url = ""
    if target is not None:
        pushed_to, remote_url = target.remote, target.url
        await _push(repo, target, job.into, network)
        await repo.note_pushed(pushed_to, job.into, commit)
    return PrdFinished(
        project_id=project_id,
        name=cmd.name,
        branch=job.branch,
        into=job.into,
        merge=merge,
        commit=commit,
        worktree_removed=job.worktree,
        pushed_to=pushed_to,
        remote_url=remote_url,
    )


async def _what(repo: FinishingRepo, root: Path, cmd: FinishPrd, record: LoopRecord) -> Finish:
    branch = record.info.branch
    if not branch:
        raise NotFound(f"the loop of PRD {cmd.name!r} names no branch", details={"prd": cmd.name})
    into = merge_into(cmd, record, await repo.current_branch())
    await repo.head_of(into)
    await repo.head_of(branch)
    worktree = files.PrdPaths(root, cmd.name).worktree
    on_worktree = record.options.worktree and Path(record.info.work_dir) == worktree and worktree.is_dir()
    return Finish(branch=branch, into=into, worktree=str(worktree) if on_worktree else "")


async def _push_target(
    repo: FinishingRepo,
    cmd: FinishPrd,
    into: str,
    config: PrdConfig,
    network: PushNetwork | None,
    project_id: str,
) -> PushTarget:
    """Where the push goes, refused before anything changes (an HTTP remote: by the egress
    rules, the repository's transport settings and a token's variable too)."""
    remote = validate_remote(cmd.remote or await repo.config_value(f"branch.{into}.remote") or "origin")
    url = await repo.remote_url(remote)
    if not is_network(url) or network is None:
        return PushTarget(remote=remote, url=url, bare=remote_path(url, repo.root))
    http = network_remote(url, config.push)
    header = auth_header(http, network.env)
    await repo.refuse_steering(http)
    scope = await network.scope(project_id, cmd.name, http)
    return PushTarget(remote=remote, url=url, network=http, scope=scope, header=header)


async def _push(repo: FinishingRepo, target: PushTarget, branch: str, network: PushNetwork | None) -> None:
    """Bring ``branch`` to the target: a fetch into the local bare repository, or ``git push``
    through a pass of the egress proxy."""
    if target.network is None or target.scope is None or network is None:
        await repo.push_to_path(target.bare, branch)
        return
    async with network.egress(target.scope) as egress:
        await repo.push_over_http(target.network, branch, egress, target.header)


async def _check(repo: FinishingRepo, job: Finish) -> None:
    """The refusals that need no change: dirty trees, protected paths, conflicts."""
    if job.worktree:
        dirty = await repo.at(job.worktree).dirty_files(ignore=())
        if dirty:
            raise Conflict(
                f"the PRD's worktree {job.worktree} has uncommitted changes: {shown_list(dirty)} "
                "(commit or discard them, then finish again)",
                details={"worktree": job.worktree, "files": dirty[:20], "count": len(dirty)},
            )
    await repo.ensure_clean()
    if job.branch == job.into:
        return
    protected = protected_changes(
        await repo.changed_paths(job.into, job.branch), sandbox.protected_rels(repo.data_dir)
    )
    if protected:
        raise PermissionDenied(
            f"branch {job.branch!r} changes protected paths: {shown_list(protected)}; finish does not "
            "merge them into your checkout (merge it yourself after a look)",
            details={"branch": job.branch, "paths": protected[:20], "count": len(protected)},
        )
    conflicts = await repo.conflicts(job.into, job.branch)
    if conflicts:
        raise Conflict(
            f"merging {job.branch!r} into {job.into!r} conflicts in {shown_list(conflicts)}: nothing "
            "was changed (merge by hand, or bring the branch up to date, then finish again)",
            details={
                "branch": job.branch,
                "into": job.into,
                "files": conflicts[:20],
                "count": len(conflicts),
            },
        )


async def _merge(repo: FinishingRepo, prd: Prd, job: Finish) -> tuple[MergeKind, str]:
    """The root on ``into``, the branch merged: ``(how, the commit into points at)``."""
    if await repo.current_branch() != job.into:
        await repo.checkout_branch(job.into, create=False)
    head, tip = await repo.head_of(job.into), await repo.head_of(job.branch)
    if await repo.is_ancestor(tip, head):
        return "up_to_date", head
    fast = await repo.is_ancestor(head, tip)
    # the PRD's own files, committed on its branch, are untracked in the root (the service's live
    # copies): set aside while git writes the branch's, then put back (the live state wins)
    brought = set(await repo.changed_paths(job.into, job.branch))
    aside = set_aside(Path(repo.root), [p for p in await repo.untracked(DAEDALUS) if p in brought])
    try:
        commit = await repo.merge(job.branch, merge_message(prd, job.branch))
    finally:
        put_back(Path(repo.root), aside)
    return ("fast_forward" if fast else "merge_commit"), commit


def set_aside(root: Path, rels: list[str]) -> dict[str, bytes]:
    """Read and remove the files ``rels`` (relative to ``root``, no link followed): their bytes."""
    kept: dict[str, bytes] = {}
    for rel in rels:
        *dirs, name = rel.split("/")
        with open_dir(root, dirs) as dfd:
            with os.fdopen(open_read(dfd, name, shown=root / rel), "rb") as fh:
                kept[rel] = fh.read(MAX_SET_ASIDE_BYTES + 1)
            if len(kept[rel]) > MAX_SET_ASIDE_BYTES:
                put_back(root, {k: v for k, v in kept.items() if k != rel})
                raise PermissionDenied(
                    f"{root / rel} is over {MAX_SET_ASIDE_BYTES} bytes: finish does not move it aside "
                    "for the merge (remove or commit it, then finish again)",
                    details={"path": rel},
                )
            os.unlink(name, dir_fd=dfd)
    return kept


def put_back(root: Path, kept: dict[str, bytes]) -> None:
    """Write each file set aside back in place (atomically, no link followed)."""
    for rel, data in kept.items():
        *dirs, name = rel.split("/")
        with open_dir(root, dirs, create=True) as dfd:
            replace_bytes(dfd, name, data, shown=root / rel)
