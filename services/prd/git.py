"""The git service (seed 004): cleanliness, commits of passed stories, the optional branch and worktree.

A repository is hostile input (decision 0300): every git command runs **inside the OS sandbox**
of the project root (:mod:`.gitrun`): only the root is writable, no network, no service secret
in the environment, no system or global configuration, and every key that runs a program
pinned off on git's command layer (which wins over ``.git/config`` and what it includes):
hooks, fsmonitor, pager, editors, askpass, credential helpers, ssh, gpg, and each filter, diff
and merge driver the repository defines. Submodules and nested repositories are never entered;
a nested repository or a gitlink the loop did not create is refused before ``git add``. Model
text only ever reaches git as one argv item after validation (a branch name) or on stdin (a
commit message, ``git commit -F -``). A checkout that would change a protected path
(:func:`jidocode.shared.sandbox.protected_rels`) is refused before it runs, and a worktree is
never created through a symlink.

Error tree::

    JidoError
    ├── GitError          git_error          a git command failed: names it and git's stderr (capped)
    ├── InvalidInput      a bad branch name, message or path, refused before git runs
    ├── NotFound          no such branch / worktree
    ├── Conflict          a dirty tree, a branch in use by another worktree
    ├── PermissionDenied  a destructive action without the ``allow_destructive_git`` capability; no
    │                     sandbox can run git here; a nested repository; a checkout changing a
    │                     protected path; a worktree path through a symlink
    └── RequestTimeout    git did not answer in time (it was stopped)

Paths are as git reports them: relative to the repository's top-level. ``ignore`` / ``exclude``
prefixes are relative to ``work_dir`` (the project root, or a worktree under it), passed to git as
literal exclude pathspecs, and every command is limited to ``work_dir``'s subtree. The repository
must be the root's own (``<root>/.git``): git looks no higher than the root.

Rooms: the text handed to git and read back (messages, branch names, pathspecs, ``-z`` listings)
is :mod:`.gittext` (pure); what runs on the host outside the sandbox (the global identity, the
walk of a worktree path) is :mod:`.githost`; the sandboxed launch and the pins are :mod:`.gitrun`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final

from jidocode.shared import sandbox
from jidocode.shared.config import default_jido_home
from jidocode.shared.errors import (
    Conflict,
    InvalidInput,
    JidoError,
    NotFound,
    PermissionDenied,
    RequestTimeout,
)

from .githost import first_link, global_identity, within
from .gitrun import LOOP_PINS, GitRun, driver_pins, git_argv, protected_changes, run_git
from .gittext import (
    BRANCH_MAX,
    SUBJECT_MAX,
    commit_message,
    exclude_specs,
    gitlinks,
    one_line,
    parse_porcelain,
    shown,
    shown_list,
    untracked_repos,
    validate_branch_name,
)

__all__ = [
    "BRANCH_MAX",
    "CAPABILITY",
    "DEFAULT_AUTHOR",
    "MESSAGE_MAX",
    "STDERR_CAP",
    "SUBJECT_MAX",
    "Commit",
    "GitError",
    "GitRepo",
    "commit_message",
    "gitlinks",
    "global_identity",
    "parse_porcelain",
    "untracked_repos",
    "validate_branch_name",
]

#: The configuration key a destructive action needs (``PrdConfig.allow_destructive_git``).
CAPABILITY: Final = "allow_destructive_git"
#: Author and committer when neither ``JIDO_GIT_AUTHOR_NAME/EMAIL`` nor git's ``user.*`` is set.
DEFAULT_AUTHOR: Final = ("JidoCode PRD loop", "prd@jidocode.invalid")
MESSAGE_MAX: Final = 64 * 1024
STDERR_CAP: Final = 2000
TIMEOUT_S: Final = 120.0
#: Git variables of the service's environment that still count (who commits, and when); every other
#: ``GIT_*`` stays out (the sandbox's allowlist drops them: ``GIT_DIR``, ``GIT_CONFIG_*`` … would
#: redirect git).
_KEPT_GIT_VARS: Final = (
    "GIT_AUTHOR_NAME",
    "GIT_AUTHOR_EMAIL",
    "GIT_AUTHOR_DATE",
    "GIT_COMMITTER_NAME",
    "GIT_COMMITTER_EMAIL",
    "GIT_COMMITTER_DATE",
)
_IN_USE: Final = ("already checked out", "is already used by worktree", "already used by worktree")


class GitError(JidoError):
    """A git command failed; ``details``: ``command`` (the subcommand and its first argument),
    ``exit_code``, ``stderr`` (capped)."""

    error_type = "git_error"


@dataclass(frozen=True)
class Commit:
    sha: str
    message: str
    files: list[str] = field(default_factory=list)


# --- the repository -------------------------------------------------------------------------------


class GitRepo:
    """A git working tree at ``work_dir`` (the project ``root``, or a worktree under it).

    Every command runs in the OS sandbox of ``root`` (chosen by the settings of ``root`` under
    ``jido_home`` and ``data_dir``, like a bash call's); ``env`` is the service's environment
    the sandbox scrubs (default ``os.environ``).
    """

    def __init__(
        self,
        work_dir: str,
        *,
        root: str | None = None,
        allow_destructive: bool = False,
        timeout_s: float = TIMEOUT_S,
        env: Mapping[str, str] | None = None,
        jido_home: str | None = None,
        data_dir: str = ".jido",
    ) -> None:
        for what, path in (("work_dir", work_dir), ("root", work_dir if root is None else root)):
            if not isinstance(path, str) or not path or "\0" in path:
                raise InvalidInput(f"{what} {path!r} is not a path")
        if not 0 < timeout_s <= 3600:
            raise InvalidInput(f"git timeout_s must be in (0, 3600] s, not {timeout_s!r}")
        self.work_dir = os.path.abspath(work_dir)
        self.root = os.path.abspath(root or work_dir)
        if not within(self.work_dir, self.root):
            raise InvalidInput(f"work_dir {self.work_dir} is not under the project root {self.root}")
        self.allow_destructive = allow_destructive
        self.timeout_s = timeout_s
        self._source_env = dict(os.environ if env is None else env)
        self.jido_home = jido_home or str(default_jido_home())
        self.data_dir = data_dir
        self._pins: tuple[tuple[str, str], ...] | None = None

    def at(self, work_dir: str) -> GitRepo:
        """The same repository's worktree at ``work_dir`` (under the same root and sandbox)."""
        return GitRepo(
            work_dir,
            root=self.root,
            allow_destructive=self.allow_destructive,
            timeout_s=self.timeout_s,
            env=self._source_env,
            jido_home=self.jido_home,
            data_dir=self.data_dir,
        )

    # -- running git --

    async def _git(
        self,
        *args: str,
        stdin: bytes | None = None,
        check: bool = True,
        cwd: str | None = None,
        env: Mapping[str, str] | None = None,
    ) -> GitRun:
        """``git <args>`` in the sandbox, in ``cwd`` (the work dir), pinned (:meth:`_pinned`);
        :class:`GitError` when it fails and ``check``; :class:`RequestTimeout` (stopped) after
        ``timeout_s``; :class:`PermissionDenied` when no sandbox can run it."""
        return await self._run(args, await self._pinned(), stdin=stdin, check=check, cwd=cwd, env=env)

    async def _run(
        self,
        args: tuple[str, ...],
        pins: tuple[tuple[str, str], ...],
        *,
        stdin: bytes | None = None,
        check: bool = True,
        cwd: str | None = None,
        env: Mapping[str, str] | None = None,
    ) -> GitRun:
        named = [a if len(a) <= 80 else a[:77] + "…" for a in args[:2]]
        command = " ".join(named)
        # git looks for the repository no higher than the root: only the root is writable
        fixed = {"GIT_CEILING_DIRECTORIES": os.path.dirname(self.root), **(env or {})}
        try:
            run = await run_git(
                git_argv(args, pins=pins, env=fixed),
                root=self.root,
                cwd=cwd or self.work_dir,
                stdin=stdin,
                timeout_s=self.timeout_s,
                source_env=self._source_env,
                jido_home=self.jido_home,
                data_dir=self.data_dir,
            )
        except RequestTimeout:
            raise RequestTimeout(
                f"git {command} did not finish within {self.timeout_s:g} s (stopped)",
                details={"command": named},
            ) from None
        except OSError as exc:  # no sandbox program, or the work dir is gone
            raise GitError(f"git {command} could not start: {exc}", details={"command": named}) from None
        text = run.err if len(run.err) <= STDERR_CAP else run.err[:STDERR_CAP] + " […]"
        if check and run.code != 0:
            raise GitError(
                f"git {command} failed (exit {run.code}): {text or '(no message)'}",
                details={"command": named, "exit_code": run.code, "stderr": text},
            )
        return GitRun(run.code, run.out, text)

    async def _pinned(self) -> tuple[tuple[str, str], ...]:
        """The pins of every command: the sandbox's, the loop's, and one per driver the
        repository's configuration (includes followed) defines, listed once per instance."""
        if self._pins is None:
            base = (*sandbox.GIT_PINS, *LOOP_PINS)
            listing = await self._run(("config", "--list", "--name-only", "-z"), base, check=False)
            if listing.code != 0:
                return base  # not a repository (yet): nothing of its own to pin
            self._pins = (*base, *driver_pins(listing.out))
        return self._pins

    # -- queries --

    async def is_repo(self) -> bool:
        """Whether ``work_dir`` is inside a git working tree of the root's own repository
        (``False`` for a missing directory)."""
        if not os.path.isdir(self.work_dir):
            return False
        run = await self._git("rev-parse", "--is-inside-work-tree", check=False)
        return run.code == 0 and run.out.strip() == b"true"

    async def common_dir(self) -> str:
        """The repository's git directory shared by all its worktrees (absolute).

        A check or provider working in a worktree needs it to run git at all (the sandbox shows
        only the work dir and hides the home): pass it as an additional (read-only) directory.
        Take it from the main checkout, whose ``.git`` directory the sandbox protects, not from
        a worktree's ``.git`` file, which model-run code could have rewritten between calls.
        """
        run = await self._git("rev-parse", "--path-format=absolute", "--git-common-dir")
        return os.path.normpath(run.out.decode("utf-8", "surrogateescape").strip())

    async def toplevel(self) -> str:
        """The top-level directory of the working tree ``work_dir`` is in (absolute, as git
        resolves it)."""
        run = await self._git("rev-parse", "--show-toplevel")
        return os.path.normpath(run.out.decode("utf-8", "surrogateescape").strip())

    async def _require_repo(self) -> None:
        if not await self.is_repo():
            raise NotFound(
                f"{self.work_dir} is not a git working tree (of a repository in {self.root})",
                details={"work_dir": self.work_dir},
            )

    async def _status(self, specs: list[str]) -> bytes:
        """``git status --porcelain=v1 -z`` of every untracked file, submodules not entered."""
        run = await self._git(
            "status",
            "--porcelain=v1",
            "-z",
            "--untracked-files=all",
            "--ignore-submodules=all",
            "--",
            ".",
            *specs,
        )
        return run.out

    async def dirty_files(self, *, ignore: tuple[str, ...] = (".daedalus/",)) -> list[str]:
        """Uncommitted changes (tracked and untracked), outside ``ignore``; a nested repository
        is one entry ending in ``/``, never entered."""
        return parse_porcelain(await self._status(exclude_specs(ignore)))

    async def ensure_clean(self, *, allow_dirty: bool = False) -> None:
        """``Conflict`` naming the changed files unless the tree is clean or ``allow_dirty``."""
        await self._require_repo()
        if allow_dirty:
            return
        files = await self.dirty_files()
        if files:
            raise Conflict(
                f"the working tree {self.work_dir} has uncommitted changes: {shown_list(files)} "
                "(commit or stash them, or allow a dirty tree)",
                details={"files": files[:20], "count": len(files)},
            )

    async def current_branch(self) -> str:
        """The checked-out branch's short name; ``""`` on a detached HEAD."""
        run = await self._git("symbolic-ref", "--quiet", "--short", "HEAD", check=False)
        if run.code == 1:
            return ""
        if run.code != 0:
            raise GitError(
                f"git symbolic-ref --quiet failed (exit {run.code}): {run.err or '(no message)'}",
                details={"command": ["symbolic-ref", "--quiet"], "exit_code": run.code, "stderr": run.err},
            )
        return run.out.decode("utf-8", "replace").strip()

    async def check_branch(self, branch: str) -> str:
        """``branch`` when it is a valid branch name (:func:`validate_branch_name`, then
        ``git check-ref-format --branch``), else ``InvalidInput``."""
        validate_branch_name(branch)
        run = await self._git("check-ref-format", "--branch", branch, check=False)
        if run.code != 0:
            raise InvalidInput(f"{branch!r} is not a valid branch name", details={"branch": branch})
        return branch

    async def branch_exists(self, branch: str) -> bool:
        """Whether ``refs/heads/<branch>`` exists (``branch`` checked first)."""
        await self.check_branch(branch)
        run = await self._git("rev-parse", "--verify", "--quiet", f"refs/heads/{branch}", check=False)
        return run.code == 0

    async def head(self) -> str:
        """The commit HEAD names (``""`` before the first commit)."""
        run = await self._git("rev-parse", "--verify", "--quiet", "HEAD", check=False)
        return run.out.decode().strip() if run.code == 0 else ""

    async def _has_head(self) -> bool:
        return (await self._git("rev-parse", "--verify", "--quiet", "HEAD", check=False)).code == 0

    async def protected_changes(self, branch: str) -> list[str]:
        """The protected paths (:func:`jidocode.shared.sandbox.protected_rels`) whose content
        differs between HEAD and ``branch``: what checking ``branch`` out would change."""
        target = f"refs/heads/{branch}"
        if await self._has_head():
            run = await self._git(
                "diff", "--name-only", "-z", "--no-renames", "--no-ext-diff", "HEAD", target
            )
        else:
            run = await self._git("ls-tree", "-r", "-z", "--name-only", "--full-tree", target)
        changed = [shown(p) for p in run.out.split(b"\0") if p]
        return protected_changes(changed, sandbox.protected_rels(self.data_dir))

    async def _refuse_protected(self, branch: str) -> None:
        changed = await self.protected_changes(branch)
        if changed:
            raise PermissionDenied(
                f"checking out branch {branch!r} would change protected paths: {shown_list(changed)} "
                "(files that decide what runs and what is allowed are changed by people, not by a "
                "branch the loop checks out)",
                details={"branch": branch, "paths": changed[:20], "count": len(changed)},
            )

    # -- changes --

    async def checkout_branch(self, branch: str, *, create: bool = True) -> bool:
        """Switch to ``branch``; created from HEAD when missing and ``create`` (else ``NotFound``).
        Whether it was created. ``Conflict`` when another worktree has it checked out;
        ``PermissionDenied`` when the switch would change a protected path."""
        await self.check_branch(branch)
        if await self.current_branch() == branch:
            return False
        created = True
        if await self.branch_exists(branch):
            await self._refuse_protected(branch)
            args: tuple[str, ...] = ("switch", "--no-guess", "--no-recurse-submodules", branch)
            created = False
        elif not create:
            raise NotFound(f"no branch {branch!r} in {self.work_dir}", details={"branch": branch})
        elif not await self._has_head():
            # an unborn branch (no commit yet): rename it (the first commit lands on ``branch``)
            args = ("symbolic-ref", "HEAD", f"refs/heads/{branch}")
        else:
            args = ("switch", "--no-recurse-submodules", "--create", branch)
        await self._in_use_is_conflict(branch, args)
        return created

    async def _in_use_is_conflict(self, branch: str, args: tuple[str, ...]) -> None:
        try:
            await self._git(*args)
        except GitError as exc:
            if any(s in str(exc.details.get("stderr", "")) for s in _IN_USE):
                raise Conflict(
                    f"branch {branch!r} is checked out in another worktree", details={"branch": branch}
                ) from None
            raise

    async def commit_all(
        self, message: str, *, exclude: tuple[str, ...] = (".daedalus/",), include: tuple[str, ...] = ()
    ) -> Commit | None:
        """Stage every change outside ``exclude`` and commit it (``None``: nothing to commit).

        ``include``: files inside ``exclude`` staged all the same (paths relative to the top of
        the work tree, taken literally: the PRD's own files, committed with each story).

        The message goes to ``git commit -F -`` on stdin, verbatim (``--cleanup=verbatim``); hooks
        never run (``core.hooksPath`` pinned, and ``--no-verify``). A nested repository (an
        untracked directory holding one, or a gitlink in the index that is not in HEAD: the loop
        never creates one) is ``PermissionDenied`` naming it, before anything is staged."""
        if not isinstance(message, str) or not message.strip():
            raise InvalidInput("commit message is empty")
        if "\0" in message:
            raise InvalidInput("commit message holds a NUL character")
        data = message.encode("utf-8", "replace")  # a lone surrogate is no text: "?"
        if len(data) > MESSAGE_MAX:
            raise InvalidInput(f"commit message is {len(data)} bytes (at most {MESSAGE_MAX})")
        specs = exclude_specs(exclude)
        await self._require_repo()
        await self._refuse_nested(specs)
        await self._git("add", "--all", "--", ".", *specs)
        if include:
            await self._git("add", "--all", "--", *(f":(top,literal){p}" for p in include))
        # an excluded path staged earlier (by hand) stays out of the loop's commit
        staged_excluded = await self._staged(*(s.replace(":(exclude,literal)", ":(literal)") for s in specs))
        staged_excluded = [p for p in staged_excluded if p not in include]
        if staged_excluded:
            if await self._has_head():
                await self._git("reset", "--quiet", "--", *(f":(top,literal){p}" for p in staged_excluded))
            else:
                await self._git(
                    "rm", "--cached", "--quiet", "-r", "--", *(f":(top,literal){p}" for p in staged_excluded)
                )
        if not await self._staged("."):
            return None
        if not data.endswith(b"\n"):
            data += b"\n"
        await self._git(
            "commit",
            "--no-verify",
            "--no-gpg-sign",
            "--cleanup=verbatim",
            "--quiet",
            "-F",
            "-",
            stdin=data,
            env=await self._author(),
        )
        sha = (await self._git("rev-parse", "--verify", "HEAD")).out.decode().strip()
        tree = await self._git("diff-tree", "--no-commit-id", "--name-only", "-r", "-z", "--root", "HEAD")
        files = sorted(shown(p) for p in tree.out.split(b"\0") if p)
        return Commit(sha=sha, message=data.decode("utf-8"), files=files)

    async def _refuse_nested(self, specs: list[str]) -> None:
        """``PermissionDenied`` naming the nested repositories ``git add --all`` would take in:
        untracked directories holding a repository, and gitlinks of the index not in HEAD."""
        nested = set(untracked_repos(await self._status(specs)))
        staged = gitlinks(
            (await self._git("ls-files", "--stage", "--full-name", "-z", "--", ".", *specs)).out
        )
        if staged and await self._has_head():
            staged -= gitlinks((await self._git("ls-tree", "-r", "-z", "--full-tree", "HEAD")).out)
        found = sorted(nested | staged)
        if found:
            raise PermissionDenied(
                f"nested git repositories in {self.work_dir}: {shown_list(found)}; the PRD loop "
                "never commits a repository inside the project (remove it, or add it yourself as a "
                "submodule)",
                details={"paths": found[:20], "count": len(found)},
            )

    async def _staged(self, *pathspecs: str) -> list[str]:
        """Paths staged (index against HEAD, or against nothing before the first commit)."""
        run = await self._git("diff", "--cached", "--name-only", "-z", "--no-renames", "--", *pathspecs)
        return sorted(os.fsdecode(p) for p in run.out.split(b"\0") if p)

    async def _author(self) -> dict[str, str]:
        """Who commits (set inside the sandbox): ``JIDO_GIT_AUTHOR_NAME/EMAIL``; else git's own
        (``GIT_AUTHOR_*``/``GIT_COMMITTER_*`` of the service's environment, ``user.*`` of the
        repository); else the user's global ``user.*`` read on the host; else
        :data:`DEFAULT_AUTHOR`."""
        env = {k: self._source_env[k] for k in _KEPT_GIT_VARS if self._source_env.get(k)}
        for part, default in zip(("NAME", "EMAIL"), DEFAULT_AUTHOR, strict=True):
            value = self._source_env.get(f"JIDO_GIT_AUTHOR_{part}", "").strip()
            if not value:
                if env.get(f"GIT_AUTHOR_{part}") and env.get(f"GIT_COMMITTER_{part}"):
                    continue
                got = await self._git("config", "--get", f"user.{part.lower()}", check=False)
                if got.code == 0 and got.out.strip():
                    continue
                value = await global_identity(part.lower(), self._source_env) or default
            env[f"GIT_AUTHOR_{part}"] = env[f"GIT_COMMITTER_{part}"] = one_line(value)
        return env

    # -- worktrees --

    def worktree_path(self, path: str) -> str:
        """``path`` (relative to ``work_dir``) as an absolute path under the root, after a walk
        that finds no symlink and nothing but directories on the way (``PermissionDenied``)."""
        if not isinstance(path, str) or not path or "\0" in path:
            raise InvalidInput(f"worktree path {path!r} is not a path")
        where = os.path.normpath(os.path.join(self.work_dir, path))  # absolute: never read as an option
        if where == self.root or not within(where, self.root):
            raise InvalidInput(
                f"worktree path {where} is not inside the project root {self.root}", details={"path": where}
            )
        linked = first_link(self.root, os.path.relpath(where, self.root))
        if linked is not None:
            raise PermissionDenied(
                f"worktree path {where} is refused: {linked} is a symlink or not a directory "
                "(a worktree is never written through a link)",
                details={"path": where, "linked": linked},
            )
        return where

    async def add_worktree(self, path: str, branch: str) -> bool:
        """``git worktree add`` at ``path`` on ``branch`` (created from HEAD when missing); whether
        the branch was created.

        ``path`` (relative to ``work_dir``) must lie under the root, reached through real
        directories only, and not exist or be an empty directory; ``Conflict`` when ``branch``
        is checked out elsewhere or there is no commit to start from; ``PermissionDenied`` when
        an existing ``branch`` differs from HEAD in a protected path."""
        where = self.worktree_path(path)
        await self.check_branch(branch)
        await self._require_repo()
        if os.path.lexists(where) and (not os.path.isdir(where) or os.listdir(where)):
            raise Conflict(f"worktree path {where} exists and is not empty", details={"path": where})
        if not await self._has_head():
            raise Conflict(
                f"{self.work_dir} has no commit yet: a worktree needs one to start from",
                details={"path": where},
            )
        created = not await self.branch_exists(branch)
        if created:
            args: tuple[str, ...] = ("worktree", "add", "--quiet", "-b", branch, where, "HEAD")
        else:
            await self._refuse_protected(branch)
            args = ("worktree", "add", "--quiet", where, branch)
        await self._in_use_is_conflict(branch, args)
        return created

    async def _worktrees(self) -> list[str]:
        run = await self._git("worktree", "list", "--porcelain", "-z")
        return [
            os.path.realpath(os.fsdecode(f[len(b"worktree ") :]))
            for f in run.out.split(b"\0")
            if f.startswith(b"worktree ")
        ]

    async def remove_worktree(self, path: str, *, force: bool = False) -> None:
        """Refused with changes in it unless ``force`` and ``allow_destructive`` (``PermissionDenied``)."""
        try:
            where = self.worktree_path(path)
        except InvalidInput:  # the root itself, or outside it: none of the loop's worktrees
            where = os.path.normpath(os.path.join(self.work_dir, path))
            raise NotFound(f"{where} is not a worktree of {self.work_dir}", details={"path": where}) from None
        real = os.path.realpath(where)
        if real not in await self._worktrees() or real == os.path.realpath(self.work_dir):
            raise NotFound(f"{where} is not a worktree of {self.work_dir}", details={"path": where})
        dirty = await self.at(where).dirty_files(ignore=())
        if dirty and not (force and self.allow_destructive):
            why = "the force was not asked for" if self.allow_destructive else f"{CAPABILITY} is not granted"
            raise PermissionDenied(
                f"removing the worktree {where} would lose uncommitted changes in {len(dirty)} file(s) "
                f"({', '.join(dirty[:20])}); {why}: this destructive git action needs the capability "
                f"{CAPABILITY} and force",
                details={"capability": CAPABILITY, "path": where, "files": dirty[:20]},
            )
        await self._git("worktree", "remove", *(("--force",) if dirty else ()), where)
