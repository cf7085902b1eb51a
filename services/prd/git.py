"""The git service (seed 004): cleanliness, commits of passed stories, the optional branch and worktree.

Every git command is an argv (never a shell line) started with asyncio's subprocess, with the
sandbox's pinned configuration (:data:`jidocode.shared.sandbox.GIT_PINS` on git's command-line
layer, which wins over the repository's own ``.git/config``): repository hooks, fsmonitor, pager,
editor, askpass and credential helpers never run, and nothing prompts (``GIT_TERMINAL_PROMPT=0``,
stdin ``/dev/null``). Model text only ever reaches git as one argv item after validation (a
branch name) or on stdin (a commit message, ``git commit -F -``).

Error tree::

    JidoError
    ├── GitError          git_error          a git command failed: names it and git's stderr (capped)
    ├── InvalidInput      a bad branch name, message or path, refused before git runs
    ├── NotFound          no such branch / worktree
    ├── Conflict          a dirty tree, a branch in use by another worktree
    ├── PermissionDenied  a destructive action without the ``allow_destructive_git`` capability
    └── RequestTimeout    git did not answer in time (it was killed)

Paths are as git reports them: relative to the repository's top-level. ``ignore`` / ``exclude``
prefixes are relative to ``work_dir`` (the project root, usually the top-level), passed to git as
literal exclude pathspecs, and every command is limited to ``work_dir``'s subtree.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import unicodedata
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final

from jidocode.shared.errors import (
    Conflict,
    InvalidInput,
    JidoError,
    NotFound,
    PermissionDenied,
    RequestTimeout,
)
from jidocode.shared.sandbox import GIT_PINS

__all__ = [
    "CAPABILITY",
    "DEFAULT_AUTHOR",
    "Commit",
    "GitError",
    "GitRepo",
    "commit_message",
    "parse_porcelain",
    "validate_branch_name",
]

#: The configuration key a destructive action needs (``PrdConfig.allow_destructive_git``).
CAPABILITY: Final = "allow_destructive_git"
#: Author and committer when neither ``JIDO_GIT_AUTHOR_NAME/EMAIL`` nor git's ``user.*`` is set.
DEFAULT_AUTHOR: Final = ("JidoCode PRD loop", "prd@jidocode.invalid")
#: Pins of our own on top of the sandbox's: a repository's ``gpg.program`` is a program too, and
#: an unattended loop cannot answer a pinentry prompt.
EXTRA_PINS: Final[tuple[tuple[str, str], ...]] = (("commit.gpgSign", "false"), ("tag.gpgSign", "false"))
SUBJECT_MAX: Final = 72
MESSAGE_MAX: Final = 64 * 1024
BRANCH_MAX: Final = 200
STDERR_CAP: Final = 2000
TIMEOUT_S: Final = 120.0
#: Git variables of the caller's environment kept (who commits); every other ``GIT_*`` is dropped
#: (``GIT_DIR``, ``GIT_INDEX_FILE``, ``GIT_CONFIG_*``, ``GIT_EXEC_PATH`` … would redirect git).
_KEPT_GIT_VARS: Final = frozenset(
    {
        "GIT_AUTHOR_NAME",
        "GIT_AUTHOR_EMAIL",
        "GIT_AUTHOR_DATE",
        "GIT_COMMITTER_NAME",
        "GIT_COMMITTER_EMAIL",
        "GIT_COMMITTER_DATE",
    }
)
_CONTROL: Final = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")
_SPACES: Final = re.compile(r"\s+")
_BRANCH_CHARS: Final = re.compile(r"[A-Za-z0-9._/+-]+")
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


@dataclass(frozen=True)
class _Run:
    code: int
    out: bytes
    err: str


# --- pure helpers ---------------------------------------------------------------------------------


def _one_line(text: str) -> str:
    """``text`` on one line: control characters (newlines included) become spaces, runs of spaces one."""
    return _SPACES.sub(" ", _CONTROL.sub(" ", unicodedata.normalize("NFC", text))).strip()


def commit_message(story_id: str, title: str, prd_name: str) -> str:
    """The commit message of a passed story: ``feat(<prd>): <story id> <title>`` (one line of at most
    72 characters, control characters stripped), a blank line, and a body naming story and PRD
    with the whole title."""
    sid, full, prd = _one_line(story_id), _one_line(title), _one_line(prd_name)
    subject = _one_line(f"feat({prd}): {sid} {full}")
    if len(subject) > SUBJECT_MAX:
        subject = subject[: SUBJECT_MAX - 1].rstrip() + "…"
    body = [f"Story: {sid}", f"Title: {full}", f"PRD: {prd}", "", "Committed by the JidoCode PRD loop."]
    return subject + "\n\n" + "\n".join(body) + "\n"


def validate_branch_name(branch: str) -> str:
    """The first check of a branch name (``InvalidInput``), before ``git check-ref-format --branch``:
    no option look-alike, no ``HEAD``, and only a plain set of characters: shell metacharacters
    (``;``, ``$``, backquotes) and ``@{…}`` (which that command would expand) are refused even
    though git would take some of them."""
    if not isinstance(branch, str) or not branch:
        raise InvalidInput("branch name is empty")
    if len(branch) > BRANCH_MAX:
        raise InvalidInput(f"branch name is {len(branch)} characters long (at most {BRANCH_MAX})")
    if branch.startswith("-"):
        raise InvalidInput(f"branch name {branch!r} starts with '-'", details={"branch": branch})
    if branch in {"HEAD", "@"} or not _BRANCH_CHARS.fullmatch(branch):
        raise InvalidInput(
            f"branch name {branch!r} is not allowed (letters, digits and . _ / + - only)",
            details={"branch": branch},
        )
    return branch


def _shown(path: bytes) -> str:
    """A path git printed, as text that any JSON encoder takes (bytes that are not UTF-8 escaped)."""
    return path.decode("utf-8", "backslashreplace")


def parse_porcelain(data: bytes) -> list[str]:
    """The paths of ``git status --porcelain=v1 -z``: each entry ``XY path``, a rename's or copy's
    original path as the next NUL-terminated field (both are listed). Sorted, unique."""
    fields = data.split(b"\0")
    paths: set[str] = set()
    i = 0
    while i < len(fields):
        entry = fields[i]
        i += 1
        if not entry:
            continue
        if len(entry) < 4 or entry[2:3] != b" ":
            raise ValueError(f"not a porcelain v1 entry: {entry[:80]!r}")
        xy = entry[:2]
        paths.add(_shown(entry[3:]))
        if b"R" in xy or b"C" in xy:
            if i < len(fields) and fields[i]:
                paths.add(_shown(fields[i]))
            i += 1
    return sorted(paths)


def _exclude_specs(prefixes: tuple[str, ...]) -> list[str]:
    """Literal exclude pathspecs (relative to the cwd) of ``prefixes``; ``InvalidInput`` for a prefix
    that is absolute, climbs out (``..``), or holds a NUL."""
    specs = []
    for prefix in prefixes:
        norm = prefix.strip("/")
        if not norm or "\0" in prefix or os.path.isabs(prefix) or ".." in norm.split("/"):
            raise InvalidInput(f"excluded path {prefix!r} must be a relative path inside the work dir")
        specs.append(f":(exclude,literal){norm}")
    return specs


# --- the repository -------------------------------------------------------------------------------


class GitRepo:
    """A git working tree at ``work_dir`` (the project root or a worktree of it)."""

    def __init__(
        self,
        work_dir: str,
        *,
        allow_destructive: bool = False,
        timeout_s: float = TIMEOUT_S,
        env: Mapping[str, str] | None = None,
    ) -> None:
        if not isinstance(work_dir, str) or not work_dir or "\0" in work_dir:
            raise InvalidInput(f"work_dir {work_dir!r} is not a path")
        if not 0 < timeout_s <= 3600:
            raise InvalidInput(f"git timeout_s must be in (0, 3600] s, not {timeout_s!r}")
        self.work_dir = os.path.abspath(work_dir)
        self.allow_destructive = allow_destructive
        self.timeout_s = timeout_s
        self._source_env = dict(os.environ if env is None else env)

    # -- running git --

    def _env(self) -> dict[str, str]:
        env = {k: v for k, v in self._source_env.items() if not k.startswith("GIT_") or k in _KEPT_GIT_VARS}
        env.update(
            GIT_TERMINAL_PROMPT="0",
            GIT_OPTIONAL_LOCKS="0",
            GIT_PAGER="cat",
            PAGER="cat",
            LC_ALL="C",
            GIT_ASKPASS="",
            SSH_ASKPASS="",
        )
        return env

    async def _git(
        self,
        *args: str,
        stdin: bytes | None = None,
        check: bool = True,
        cwd: str | None = None,
        env: Mapping[str, str] | None = None,
    ) -> _Run:
        """``git -c <pins> <args>`` in ``cwd`` (the work dir); :class:`GitError` when it fails and
        ``check``; :class:`RequestTimeout` (git killed) after ``timeout_s``."""
        argv = ["git"]
        for key, value in (*GIT_PINS, *EXTRA_PINS):
            argv += ["-c", f"{key}={value}"]
        argv += args
        named = [a if len(a) <= 80 else a[:77] + "…" for a in args[:2]]
        command = " ".join(named)
        try:
            proc = await asyncio.create_subprocess_exec(
                *argv,
                cwd=cwd or self.work_dir,
                env={**self._env(), **(env or {})},
                stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                start_new_session=True,  # its own group: a timeout or cancel kills what git started too
            )
        except OSError as exc:  # no git on PATH, or the work dir is gone
            raise GitError(f"git {command} could not start: {exc}", details={"command": named}) from None
        try:
            out, err = await asyncio.wait_for(proc.communicate(stdin), self.timeout_s)
        except TimeoutError:
            raise RequestTimeout(
                f"git {command} did not finish within {self.timeout_s:g} s (killed)",
                details={"command": named},
            ) from None
        finally:
            if proc.returncode is None:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(proc.pid, signal.SIGKILL)
                await proc.wait()
        text = err.decode("utf-8", "replace").strip()
        if len(text) > STDERR_CAP:
            text = text[:STDERR_CAP] + " […]"
        code = proc.returncode if proc.returncode is not None else -1
        if check and code != 0:
            raise GitError(
                f"git {command} failed (exit {code}): {text or '(no message)'}",
                details={"command": named, "exit_code": code, "stderr": text},
            )
        return _Run(code, out, text)

    # -- queries --

    async def is_repo(self) -> bool:
        """Whether ``work_dir`` is inside a git working tree (``False`` for a missing directory)."""
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

    async def _require_repo(self) -> None:
        if not await self.is_repo():
            raise NotFound(f"{self.work_dir} is not a git working tree", details={"work_dir": self.work_dir})

    async def dirty_files(self, *, ignore: tuple[str, ...] = (".daedalus/",)) -> list[str]:
        """Uncommitted changes (tracked and untracked), outside ``ignore``."""
        specs = _exclude_specs(ignore)
        run = await self._git(
            "status",
            "--porcelain=v1",
            "-z",
            "--untracked-files=all",
            "--ignore-submodules=none",
            "--",
            ".",
            *specs,
        )
        return parse_porcelain(run.out)

    async def ensure_clean(self, *, allow_dirty: bool = False) -> None:
        """``Conflict`` naming the changed files unless the tree is clean or ``allow_dirty``."""
        await self._require_repo()
        if allow_dirty:
            return
        files = await self.dirty_files()
        if files:
            shown = ", ".join(files[:20]) + (f" and {len(files) - 20} more" if len(files) > 20 else "")
            raise Conflict(
                f"the working tree {self.work_dir} has uncommitted changes: {shown} "
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

    async def _check_branch(self, branch: str) -> str:
        validate_branch_name(branch)
        run = await self._git("check-ref-format", "--branch", branch, check=False)
        if run.code != 0:
            raise InvalidInput(f"{branch!r} is not a valid branch name", details={"branch": branch})
        return branch

    async def _branch_exists(self, branch: str) -> bool:
        run = await self._git("rev-parse", "--verify", "--quiet", f"refs/heads/{branch}", check=False)
        return run.code == 0

    async def _has_head(self) -> bool:
        return (await self._git("rev-parse", "--verify", "--quiet", "HEAD", check=False)).code == 0

    # -- changes --

    async def checkout_branch(self, branch: str, *, create: bool = True) -> None:
        """Switch to ``branch``; created from HEAD when missing and ``create`` (else ``NotFound``).
        ``Conflict`` when another worktree has it checked out."""
        await self._check_branch(branch)
        if await self.current_branch() == branch:
            return
        if await self._branch_exists(branch):
            args: tuple[str, ...] = ("switch", "--no-guess", branch)
        elif not create:
            raise NotFound(f"no branch {branch!r} in {self.work_dir}", details={"branch": branch})
        elif not await self._has_head():
            # an unborn branch (no commit yet): rename it (the first commit lands on ``branch``)
            args = ("symbolic-ref", "HEAD", f"refs/heads/{branch}")
        else:
            args = ("switch", "--create", branch)
        try:
            await self._git(*args)
        except GitError as exc:
            if any(s in str(exc.details.get("stderr", "")) for s in _IN_USE):
                raise Conflict(
                    f"branch {branch!r} is checked out in another worktree", details={"branch": branch}
                ) from None
            raise

    async def commit_all(self, message: str, *, exclude: tuple[str, ...] = (".daedalus/",)) -> Commit | None:
        """Stage every change outside ``exclude`` and commit it (``None``: nothing to commit).

        The message goes to ``git commit -F -`` on stdin, verbatim (``--cleanup=verbatim``); hooks
        never run (``core.hooksPath`` pinned, and ``--no-verify``)."""
        if not isinstance(message, str) or not message.strip():
            raise InvalidInput("commit message is empty")
        if "\0" in message:
            raise InvalidInput("commit message holds a NUL character")
        data = message.encode("utf-8", "replace")  # a lone surrogate is no text: "?"
        if len(data) > MESSAGE_MAX:
            raise InvalidInput(f"commit message is {len(data)} bytes (at most {MESSAGE_MAX})")
        specs = _exclude_specs(exclude)
        await self._require_repo()
        await self._git("add", "--all", "--", ".", *specs)
        # an excluded path staged earlier (by hand) stays out of the loop's commit
        staged_excluded = await self._staged(*(s.replace(":(exclude,literal)", ":(literal)") for s in specs))
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
            "--cleanup=verbatim",
            "--quiet",
            "-F",
            "-",
            stdin=data,
            env=await self._author(),
        )
        sha = (await self._git("rev-parse", "--verify", "HEAD")).out.decode().strip()
        tree = await self._git("diff-tree", "--no-commit-id", "--name-only", "-r", "-z", "--root", "HEAD")
        files = sorted(_shown(p) for p in tree.out.split(b"\0") if p)
        return Commit(sha=sha, message=data.decode("utf-8"), files=files)

    async def _staged(self, *pathspecs: str) -> list[str]:
        """Paths staged (index against HEAD, or against nothing before the first commit)."""
        run = await self._git("diff", "--cached", "--name-only", "-z", "--no-renames", "--", *pathspecs)
        return sorted(os.fsdecode(p) for p in run.out.split(b"\0") if p)

    async def _author(self) -> dict[str, str]:
        """Who commits: ``JIDO_GIT_AUTHOR_NAME/EMAIL``, else git's own (``GIT_AUTHOR_*`` of the
        environment, ``user.*`` of its configuration), else :data:`DEFAULT_AUTHOR`."""
        env: dict[str, str] = {}
        for part, default in zip(("NAME", "EMAIL"), DEFAULT_AUTHOR, strict=True):
            value = self._source_env.get(f"JIDO_GIT_AUTHOR_{part}", "").strip()
            if not value:
                if self._source_env.get(f"GIT_AUTHOR_{part}") and self._source_env.get(
                    f"GIT_COMMITTER_{part}"
                ):
                    continue
                got = await self._git("config", "--get", f"user.{part.lower()}", check=False)
                if got.code == 0 and got.out.strip():
                    continue
                value = default
            env[f"GIT_AUTHOR_{part}"] = env[f"GIT_COMMITTER_{part}"] = _one_line(value)
        return env

    # -- worktrees --

    def _path(self, path: str) -> str:
        if not isinstance(path, str) or not path or "\0" in path:
            raise InvalidInput(f"worktree path {path!r} is not a path")
        return os.path.normpath(os.path.join(self.work_dir, path))  # absolute: never read as an option

    async def add_worktree(self, path: str, branch: str) -> None:
        """``git worktree add`` at ``path`` on ``branch`` (created from HEAD when missing).

        ``path`` (relative to ``work_dir``) must not exist or be an empty directory; ``Conflict``
        when ``branch`` is checked out elsewhere or there is no commit to start from."""
        where = self._path(path)
        await self._check_branch(branch)
        await self._require_repo()
        if os.path.exists(where) and (not os.path.isdir(where) or os.listdir(where)):
            raise Conflict(f"worktree path {where} exists and is not empty", details={"path": where})
        if not await self._has_head():
            raise Conflict(
                f"{self.work_dir} has no commit yet: a worktree needs one to start from",
                details={"path": where},
            )
        if await self._branch_exists(branch):
            args: tuple[str, ...] = ("worktree", "add", "--quiet", where, branch)
        else:
            args = ("worktree", "add", "--quiet", "-b", branch, where, "HEAD")
        try:
            await self._git(*args)
        except GitError as exc:
            if any(s in str(exc.details.get("stderr", "")) for s in _IN_USE):
                raise Conflict(
                    f"branch {branch!r} is checked out in another worktree", details={"branch": branch}
                ) from None
            raise

    async def _worktrees(self) -> list[str]:
        run = await self._git("worktree", "list", "--porcelain", "-z")
        return [
            os.path.realpath(os.fsdecode(f[len(b"worktree ") :]))
            for f in run.out.split(b"\0")
            if f.startswith(b"worktree ")
        ]

    async def remove_worktree(self, path: str, *, force: bool = False) -> None:
        """Refused with changes in it unless ``force`` and ``allow_destructive`` (``PermissionDenied``)."""
        where = self._path(path)
        real = os.path.realpath(where)
        if real not in await self._worktrees() or real == os.path.realpath(self.work_dir):
            raise NotFound(f"{where} is not a worktree of {self.work_dir}", details={"path": where})
        dirty = await GitRepo(where, timeout_s=self.timeout_s, env=self._source_env).dirty_files(ignore=())
        if dirty and not (force and self.allow_destructive):
            why = "the force was not asked for" if self.allow_destructive else f"{CAPABILITY} is not granted"
            raise PermissionDenied(
                f"removing the worktree {where} would lose uncommitted changes in {len(dirty)} file(s) "
                f"({', '.join(dirty[:20])}); {why}: this destructive git action needs the capability "
                f"{CAPABILITY} and force",
                details={"capability": CAPABILITY, "path": where, "files": dirty[:20]},
            )
        await self._git("worktree", "remove", *(("--force",) if dirty else ()), where)
