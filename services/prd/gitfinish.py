"""The git of finishing a PRD (decision 0337): merge its branch, read the remote, push to a path.

Everything runs in the OS sandbox as the loop's git does (:mod:`.git`, decision 0300), with the
same pins. The checks come before any change and touch no file: which paths the branch changes
(``git diff into...branch``) and whether the merge would conflict (``git merge-tree
--write-tree``, git 2.38 or later, which merges in memory). The merge itself is ``git merge``
in the project root: a fast-forward when ``into`` has nothing of its own, else a merge commit
(no hooks, no signing, the loop's author).

A push to a **local bare repository** (a path remote, or ``file://``) needs no network. Its sandbox is rooted at the remote,
the one writable place there, and the project is visible read-only: the remote *fetches* the
branch from the project (``git --git-dir=<remote> fetch <root> refs/heads/b:refs/heads/b``),
refusing a non-fast-forward as a push would; only that command may use the local transport
(``protocol.file.allow`` is pinned back to ``always`` for it alone).

A push to an HTTP remote (decision 0343, :mod:`.gitpush`) is ``git push <url>`` in the
project root's sandbox with the egress proxy as its only way out, the one transport it uses
allowed, and a token's header read from standard input (never argv, never a file).
"""

from __future__ import annotations

import os
from typing import Final

from jidocode.shared import sandbox
from jidocode.shared.errors import Conflict, InvalidInput, NotFound, PermissionDenied, RequestTimeout

from .git import STDERR_CAP, GitError, GitRepo
from .gitpush import NetworkRemote, push_pins, steering_keys
from .gitrun import GitRun, git_argv, run_git
from .gittext import shown, shown_list

__all__ = ["FinishingRepo"]

#: What lets the one push command use the local transport (``LOOP_PINS`` say ``never``).
_FILE_TRANSPORT: Final = (("protocol.file.allow", "always"),)
_REJECTED: Final = ("non-fast-forward", "[rejected]", "fetch first")


class FinishingRepo(GitRepo):
    """The project root's repository, with what ``finish`` needs on top of :class:`GitRepo`."""

    async def head_of(self, branch: str) -> str:
        """The commit ``refs/heads/<branch>`` points at (``NotFound`` when there is no such branch)."""
        await self.check_branch(branch)
        run = await self._git(
            "rev-parse", "--verify", "--quiet", f"refs/heads/{branch}^{{commit}}", check=False
        )
        if run.code != 0:
            raise NotFound(f"no branch {branch!r} in {self.root}", details={"branch": branch})
        return run.out.decode().strip()

    async def is_ancestor(self, older: str, newer: str) -> bool:
        """Whether commit ``older`` is ``newer`` or one of its ancestors."""
        run = await self._git("merge-base", "--is-ancestor", older, newer, check=False)
        if run.code not in (0, 1):
            raise GitError(
                f"git merge-base --is-ancestor failed (exit {run.code}): {run.err or '(no message)'}",
                details={"command": ["merge-base", "--is-ancestor"], "exit_code": run.code},
            )
        return run.code == 0

    async def changed_paths(self, into: str, branch: str) -> list[str]:
        """The paths ``branch`` changed since it left ``into`` (``git diff into...branch``; both
        branch names, never read as a tag or a revision expression)."""
        run = await self._git(
            "diff",
            "--name-only",
            "-z",
            "--no-renames",
            "--no-ext-diff",
            f"refs/heads/{into}...refs/heads/{branch}",
            "--",
        )
        return sorted({shown(p) for p in run.out.split(b"\0") if p})

    async def conflicts(self, into: str, branch: str) -> list[str]:
        """The files a merge of ``branch`` into ``into`` would leave in conflict (none: ``[]``),
        found by a merge in memory: no file and no ref changes."""
        run = await self._git(
            "merge-tree",
            "--write-tree",
            "--name-only",
            "--no-messages",
            "-z",
            f"refs/heads/{into}",
            f"refs/heads/{branch}",
            check=False,
        )
        if run.code == 0:
            return []
        if run.code != 1:
            raise GitError(
                f"git merge-tree failed (exit {run.code}): {run.err or '(no message)'} "
                "(finishing a PRD needs git 2.38 or later)",
                details={"command": ["merge-tree", "--write-tree"], "exit_code": run.code, "stderr": run.err},
            )
        return sorted({shown(p) for p in run.out.split(b"\0")[1:] if p})

    async def merge(self, branch: str, message: str) -> str:
        """``git merge`` of ``refs/heads/<branch>`` into the checked-out branch: a fast-forward
        when possible, else a merge commit with ``message`` (one line, an argv item). The new
        HEAD. A merge that stops half-way is aborted before :class:`GitError` is raised."""
        if not message or "\n" in message or "\0" in message:
            raise InvalidInput("a merge message is one line of text")
        run = await self._git(
            "merge",
            "--ff",
            "--no-edit",
            "--no-verify",
            "--no-gpg-sign",
            "--no-stat",
            "--no-log",
            "--quiet",
            "-m",
            message,
            f"refs/heads/{branch}",
            check=False,
            env=await self._author(),
        )
        if run.code != 0:
            await self._git("merge", "--abort", check=False)
            raise GitError(
                f"git merge of {branch!r} failed (exit {run.code}): {run.err or '(no message)'} (aborted)",
                details={"command": ["merge", branch], "exit_code": run.code, "stderr": run.err},
            )
        return (await self._git("rev-parse", "--verify", "HEAD")).out.decode().strip()

    async def untracked(self, prefix: str) -> list[str]:
        """The untracked files under ``prefix`` (relative to the root; ignored ones left out)."""
        run = await self._git("ls-files", "--others", "--exclude-standard", "-z", "--", f":(literal){prefix}")
        return sorted({shown(p) for p in run.out.split(b"\0") if p})

    async def config_value(self, key: str) -> str:
        """The repository's value of ``key`` (``""`` when unset)."""
        run = await self._git("config", "--get", key, check=False)
        return run.out.decode("utf-8", "surrogateescape").strip() if run.code == 0 else ""

    async def remote_url(self, remote: str) -> str:
        """Where a push to ``remote`` goes: its ``pushurl``, else its ``url`` (``NotFound`` when
        neither is configured)."""
        url = await self.config_value(f"remote.{remote}.pushurl") or await self.config_value(
            f"remote.{remote}.url"
        )
        if not url:
            raise NotFound(
                f"no remote {remote!r} is configured in {self.root} (git remote add {remote} <url>)",
                details={"remote": remote},
            )
        return url

    async def note_pushed(self, remote: str, branch: str, sha: str) -> None:
        """Move ``refs/remotes/<remote>/<branch>`` to ``sha``: what a push records of the remote."""
        await self._git("update-ref", f"refs/remotes/{remote}/{branch}", sha)

    async def push_to_path(self, bare: str, branch: str) -> None:
        """Bring ``branch`` to the bare repository at ``bare`` (absolute), as ``git push`` would:
        refused (``Conflict``) when the remote's branch has commits this one lacks; ``InvalidInput``
        when ``bare`` is not a bare repository."""
        probe = await self._in_remote(bare, ("rev-parse", "--is-bare-repository"))
        if probe.code != 0 or probe.out.strip() != b"true":
            raise InvalidInput(
                f"the remote {bare} is not a bare git repository: a local remote must be one "
                "(git init --bare), a push never writes into another checkout",
                details={"remote": bare},
            )
        ref = f"refs/heads/{branch}"
        args = (
            "fetch",
            "--quiet",
            "--no-tags",
            "--no-write-fetch-head",
            "--no-recurse-submodules",
            self.root,
        )
        run = await self._in_remote(bare, (*args, f"{ref}:{ref}"))
        if run.code == 0:
            return
        if any(marker in run.err for marker in _REJECTED):
            raise Conflict(
                f"the remote {bare} has commits on {branch!r} that the project's {branch!r} lacks: "
                "bring them in first (git pull), then finish again",
                details={"remote": bare, "branch": branch},
            )
        raise GitError(
            f"the push of {branch!r} to {bare} failed (exit {run.code}): {run.err or '(no message)'}",
            details={"command": ["fetch", bare], "exit_code": run.code, "stderr": run.err},
        )

    async def refuse_steering(self, remote: NetworkRemote) -> None:
        """``PermissionDenied`` naming the keys when the repository's configuration (includes
        followed) would steer a push to ``remote`` (:func:`~.gitpush.steering_keys`)."""
        listing = await self._git("config", "--list", "--name-only", "-z", check=False)
        keys = steering_keys(listing.out) if listing.code == 0 else []
        if keys:
            raise PermissionDenied(
                f"the repository's configuration sets {shown_list(keys)}: finish does not push to "
                f"{remote.host} with transport settings of the project (remove them, or push yourself)",
                details={"host": remote.host, "keys": keys[:20]},
            )

    async def push_over_http(
        self, remote: NetworkRemote, branch: str, egress: sandbox.Egress, header: str
    ) -> None:
        """``git push <url> refs/heads/b:refs/heads/b`` through ``egress`` (the pass's proxy);
        ``header`` (an ``Authorization`` line, or ``""``) scoped to the remote's URL and read
        from standard input. ``Conflict`` when the remote has commits the branch lacks."""
        ref = f"refs/heads/{branch}"
        secret_key = f"http.{remote.base}.extraHeader" if header else ""
        fixed = {"GIT_CEILING_DIRECTORIES": os.path.dirname(self.root)}
        args = (
            "push",
            "--quiet",
            "--no-verify",
            "--no-signed",
            "--no-recurse-submodules",
            remote.url,
            f"{ref}:{ref}",
        )
        pins = (*await self._pinned(), *push_pins(remote, egress.url))
        argv = git_argv(args, pins=pins, env=fixed, secret_key=secret_key)
        try:
            run = await run_git(
                argv,
                root=self.root,
                cwd=self.root,
                stdin=(header + "\n").encode() if header else None,
                timeout_s=self.timeout_s,
                source_env=self._source_env,
                jido_home=self.jido_home,
                data_dir=self.data_dir,
                egress=egress,
            )
        except RequestTimeout:
            raise RequestTimeout(
                f"git push to {remote.host} did not finish within {self.timeout_s:g} s (stopped)",
                details={"command": ["push", remote.host]},
            ) from None
        except OSError as exc:
            raise GitError(f"git push could not start: {exc}", details={"command": ["push"]}) from None
        if run.code == 0:
            return
        err = run.err if len(run.err) <= STDERR_CAP else run.err[:STDERR_CAP] + " […]"
        if any(marker in err for marker in _REJECTED):
            raise Conflict(
                f"the remote {remote.url} has commits on {branch!r} that the project's {branch!r} lacks: "
                "bring them in first (git pull), then finish again",
                details={"remote": remote.url, "branch": branch},
            )
        raise GitError(
            f"the push of {branch!r} to {remote.url} failed (exit {run.code}): {err or '(no message)'}",
            details={"command": ["push", remote.host], "exit_code": run.code, "stderr": err},
        )

    async def _in_remote(self, bare: str, args: tuple[str, ...]) -> GitRun:
        """``git --git-dir=<bare> <args>`` in a sandbox rooted at ``bare`` (writable), the project
        root visible read-only; the project's pins, and the local transport for this command."""
        pins = (*await self._pinned(), *_FILE_TRANSPORT)
        env = {"GIT_CEILING_DIRECTORIES": os.path.dirname(bare)}
        argv = git_argv((f"--git-dir={bare}", *args), pins=pins, env=env)
        try:
            run = await run_git(
                argv,
                root=bare,
                cwd=bare,
                stdin=None,
                timeout_s=self.timeout_s,
                source_env=self._source_env,
                jido_home=self.jido_home,
                data_dir=self.data_dir,
                additional_directories=(self.root,),
            )
        except RequestTimeout:
            raise RequestTimeout(
                f"git {args[0]} in the remote {bare} did not finish within {self.timeout_s:g} s (stopped)",
                details={"command": [args[0], bare]},
            ) from None
        except OSError as exc:
            raise GitError(
                f"git {args[0]} in {bare} could not start: {exc}", details={"command": [args[0]]}
            ) from None
        text = run.err if len(run.err) <= STDERR_CAP else run.err[:STDERR_CAP] + " […]"
        return GitRun(run.code, run.out, text)
