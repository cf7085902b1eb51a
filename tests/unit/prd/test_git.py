"""The git service against real git in throw-away repositories, and its attacks.

Each repository lives under ``tmp_path`` with a home of its own (no user's ``~/.gitconfig``
reaches git); git on the host (:func:`host_git`) sets them up and checks what the service did.
"""

from __future__ import annotations

import asyncio
import os
import stat
import subprocess
import uuid
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jidocode.services.prd.git import (
    CAPABILITY,
    DEFAULT_AUTHOR,
    STDERR_CAP,
    Commit,
    GitError,
    GitRepo,
    commit_message,
    parse_porcelain,
    validate_branch_name,
)
from jidocode.shared.errors import Conflict, InvalidInput, NotFound, PermissionDenied, RequestTimeout
from tests.security.sandbox_support import processes_with


def host_git(root: Path, *args: str, env: dict[str, str]) -> str:
    return subprocess.run(
        ["git", "-C", str(root), *args], capture_output=True, text=True, check=True, env=env
    ).stdout


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    home = tmp_path / "home"
    home.mkdir()
    return {"PATH": os.environ["PATH"], "HOME": str(home), "GIT_CONFIG_NOSYSTEM": "1"}


@pytest.fixture
def repo(tmp_path: Path, env: dict[str, str]) -> Path:
    """A repository with one commit (``README``) on ``main``, no user configured."""
    root = tmp_path / "repo"
    root.mkdir()
    host_git(root, "init", "-q", "-b", "main", env=env)
    (root / "README").write_text("hello\n")
    host_git(root, "add", "README", env=env)
    host_git(root, "-c", "user.name=T", "-c", "user.email=t@x", "commit", "-qm", "init", env=env)
    return root


def trap(path: Path, canary: Path) -> None:
    """An executable script at ``path`` that creates ``canary`` when run."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"#!/bin/sh\ntouch {canary}\n")
    path.chmod(path.stat().st_mode | stat.S_IEXEC)


# --- the pure helpers ------------------------------------------------------------------------------


def test_commit_message_subject_and_body() -> None:
    msg = commit_message("US-001", "Add the login form", "auth")
    subject, blank, *body = msg.splitlines()
    assert subject == "feat(auth): US-001 Add the login form"
    assert blank == ""
    assert "Story: US-001" in body and "PRD: auth" in body and "Title: Add the login form" in body


def test_commit_message_long_title_is_cut_at_72_and_kept_whole_in_the_body() -> None:
    title = "word " * 40
    msg = commit_message("US-2", title, "p")
    subject = msg.splitlines()[0]
    assert len(subject) == 72 and subject.endswith("…")
    assert f"Title: {title.strip()}" in msg


@given(st.text(), st.text(), st.text())
def test_commit_message_subject_is_one_clean_line(story: str, title: str, prd: str) -> None:
    msg = commit_message(story, title, prd)
    subject = msg.split("\n", 1)[0]
    assert len(subject) <= 72
    assert subject.startswith("feat(")
    assert not any(ord(c) < 32 or 0x7F <= ord(c) <= 0x9F for c in subject)
    # the body's lines hold no control character but the newlines between them
    assert not any((ord(c) < 32 and c != "\n") or 0x7F <= ord(c) <= 0x9F for c in msg)


def test_parse_porcelain_with_renames_spaces_and_newlines() -> None:
    data = b" M a.txt\0?? dir/new file\0R  new.py\0old.py\0A  we\nird\0"
    assert parse_porcelain(data) == ["a.txt", "dir/new file", "new.py", "old.py", "we\nird"]
    assert parse_porcelain(b"") == []
    with pytest.raises(ValueError, match="porcelain"):
        parse_porcelain(b"garbage\0")


@pytest.mark.parametrize("name", ["-D", "--exec=x", "-", "@{-1}", "HEAD", "a\nb", "x" * 201, ""])
def test_branch_names_refused_before_git(name: str) -> None:
    with pytest.raises(InvalidInput):
        validate_branch_name(name)


def test_bad_construction_is_refused() -> None:
    with pytest.raises(InvalidInput, match="work_dir"):
        GitRepo("")
    with pytest.raises(InvalidInput, match="timeout_s"):
        GitRepo("/x", timeout_s=0)


# --- queries -----------------------------------------------------------------------------------------


async def test_is_repo(repo: Path, tmp_path: Path, env: dict[str, str]) -> None:
    assert await GitRepo(str(repo), env=env).is_repo()
    plain = tmp_path / "plain"
    plain.mkdir()
    # a git directory above tmp_path would make ``plain`` a repo; none is expected under /tmp
    assert not await GitRepo(str(plain), env={**env, "GIT_CEILING_DIRECTORIES": str(tmp_path)}).is_repo()
    assert not await GitRepo(str(tmp_path / "missing"), env=env).is_repo()


async def test_dirty_files_and_ensure_clean(repo: Path, env: dict[str, str]) -> None:
    git = GitRepo(str(repo), env=env)
    assert await git.dirty_files() == []
    await git.ensure_clean()
    (repo / "README").write_text("changed\n")
    (repo / "sub").mkdir()
    (repo / "sub" / "new file.txt").write_text("x")
    (repo / ".daedalus" / "prds" / "a").mkdir(parents=True)
    (repo / ".daedalus" / "prds" / "a" / "prd.json").write_text("{}")
    assert await git.dirty_files() == ["README", "sub/new file.txt"]
    assert ".daedalus/prds/a/prd.json" in await git.dirty_files(ignore=())
    with pytest.raises(Conflict, match="README") as info:
        await git.ensure_clean()
    assert info.value.details["files"] == ["README", "sub/new file.txt"]
    await git.ensure_clean(allow_dirty=True)


async def test_ensure_clean_names_at_most_20_files(repo: Path, env: dict[str, str]) -> None:
    for i in range(25):
        (repo / f"f{i:02}").write_text("x")
    with pytest.raises(Conflict, match="and 5 more") as info:
        await GitRepo(str(repo), env=env).ensure_clean()
    assert len(info.value.details["files"]) == 20 and info.value.details["count"] == 25


async def test_ensure_clean_outside_a_repo_is_not_found(tmp_path: Path, env: dict[str, str]) -> None:
    plain = tmp_path / "plain"
    plain.mkdir()
    with pytest.raises(NotFound, match="not a git working tree"):
        await GitRepo(str(plain), env={**env, "GIT_CEILING_DIRECTORIES": str(tmp_path)}).ensure_clean()


async def test_excluded_prefix_must_stay_inside(repo: Path, env: dict[str, str]) -> None:
    git = GitRepo(str(repo), env=env)
    for bad in ("/etc", "../x", "a/../../b", ""):
        with pytest.raises(InvalidInput, match="excluded path"):
            await git.dirty_files(ignore=(bad,))


# --- commits -----------------------------------------------------------------------------------------


async def test_commit_all_commits_everything_but_daedalus(repo: Path, env: dict[str, str]) -> None:
    git = GitRepo(str(repo), env=env)
    (repo / "src").mkdir()
    (repo / "src" / "a.py").write_text("a = 1\n")
    (repo / "README").write_text("changed\n")
    (repo / ".daedalus").mkdir()
    (repo / ".daedalus" / "state").write_text("s")
    msg = commit_message("US-1", "Add a", "demo")
    commit = await git.commit_all(msg)
    assert isinstance(commit, Commit)
    assert commit.files == ["README", "src/a.py"]
    assert host_git(repo, "rev-parse", "HEAD", env=env).strip() == commit.sha
    assert host_git(repo, "log", "-1", "--format=%B", env=env) == msg + "\n"  # %B adds one newline
    author = host_git(repo, "log", "-1", "--format=%an <%ae>|%cn <%ce>", env=env).strip()
    assert author == "{0} <{1}>|{0} <{1}>".format(*DEFAULT_AUTHOR)
    assert await git.dirty_files() == []
    assert await git.dirty_files(ignore=()) == [".daedalus/state"]
    assert await git.commit_all(msg) is None  # nothing left to commit


async def test_commit_all_keeps_a_staged_daedalus_file_out(repo: Path, env: dict[str, str]) -> None:
    (repo / ".daedalus").mkdir()
    (repo / ".daedalus" / "x").write_text("s")
    (repo / "a").write_text("a")
    host_git(repo, "add", "-f", ".daedalus/x", env=env)
    commit = await GitRepo(str(repo), env=env).commit_all("m")
    assert commit is not None and commit.files == ["a"]


async def test_first_commit_of_an_empty_repo(tmp_path: Path, env: dict[str, str]) -> None:
    root = tmp_path / "empty"
    root.mkdir()
    host_git(root, "init", "-q", "-b", "main", env=env)
    git = GitRepo(str(root), env=env)
    assert await git.commit_all("nothing") is None
    (root / "a").write_text("a")
    commit = await git.commit_all("first")
    assert commit is not None and commit.files == ["a"]
    assert await git.current_branch() == "main"


async def test_author_from_jido_env_or_repo_config(repo: Path, env: dict[str, str]) -> None:
    (repo / "a").write_text("a")
    await GitRepo(
        str(repo), env={**env, "JIDO_GIT_AUTHOR_NAME": "Ada", "JIDO_GIT_AUTHOR_EMAIL": "ada@x"}
    ).commit_all("m1")
    assert host_git(repo, "log", "-1", "--format=%an <%ae>", env=env).strip() == "Ada <ada@x>"
    host_git(repo, "config", "user.name", "Repo User", env=env)
    host_git(repo, "config", "user.email", "repo@x", env=env)
    (repo / "b").write_text("b")
    await GitRepo(str(repo), env=env).commit_all("m2")
    assert host_git(repo, "log", "-1", "--format=%an <%ae>", env=env).strip() == "Repo User <repo@x>"


@pytest.mark.parametrize("bad", ["", "   \n", "a\0b", "x" * (64 * 1024 + 1)])
async def test_bad_commit_message_refused(repo: Path, env: dict[str, str], bad: str) -> None:
    (repo / "a").write_text("a")
    with pytest.raises(InvalidInput, match="commit message"):
        await GitRepo(str(repo), env=env).commit_all(bad)
    assert host_git(repo, "rev-list", "--count", "HEAD", env=env).strip() == "1"


# --- attacks -----------------------------------------------------------------------------------------


async def test_hostile_message_is_committed_verbatim_and_runs_nothing(
    repo: Path, env: dict[str, str], tmp_path: Path
) -> None:
    pwned = tmp_path / "pwned"
    title = f"$(touch {pwned}) `touch {pwned}`; touch {pwned}\n--amend\n# not a comment -F /etc/passwd"
    msg = commit_message("US-1; rm -rf /", title, "p$(id)")
    raw = f"{title}\n\n--amend --no-edit\n"
    git = GitRepo(str(repo), env=env)
    for message in (msg, raw):
        (repo / "f").write_text(message)
        commit = await git.commit_all(message)
        assert commit is not None
        assert host_git(repo, "log", "-1", "--format=%B", env=env).rstrip("\n") == message.rstrip("\n")
    assert not pwned.exists() and not (repo / "pwned").exists()
    assert host_git(repo, "rev-list", "--count", "HEAD", env=env).strip() == "3"  # nothing amended
    assert "$(touch" in msg.splitlines()[0]


async def test_repository_hooks_never_run(repo: Path, env: dict[str, str], tmp_path: Path) -> None:
    canary = tmp_path / "hook-ran"
    for hook in ("pre-commit", "commit-msg", "prepare-commit-msg", "post-commit", "post-checkout"):
        trap(repo / ".git" / "hooks" / hook, canary)
    host_git(repo, "config", "core.hooksPath", str(repo / ".git" / "hooks"), env=env)
    git = GitRepo(str(repo), env=env)
    (repo / "a").write_text("a")
    assert await git.commit_all("m") is not None
    await git.checkout_branch("feature")
    await git.add_worktree(".daedalus/worktrees/wt", "other")  # worktrees live under the root
    assert not canary.exists()


async def test_fsmonitor_and_repo_programs_never_run(repo: Path, env: dict[str, str], tmp_path: Path) -> None:
    canary = tmp_path / "program-ran"
    script = tmp_path / "evil.sh"
    trap(script, canary)
    for key in ("core.fsmonitor", "core.pager", "core.editor", "credential.helper", "gpg.program"):
        host_git(repo, "config", key, str(script), env=env)
    host_git(repo, "config", "commit.gpgSign", "true", env=env)
    git = GitRepo(str(repo), env=env)
    (repo / "a").write_text("a")
    assert await git.dirty_files() == ["a"]
    assert await git.commit_all("m") is not None
    assert not canary.exists()


@pytest.mark.parametrize("name", ["-D", "--exec=x", "a..b", "foo;rm", "foo bar", "a~1", "x.lock", "@{-1}"])
async def test_hostile_branch_names_refused(repo: Path, env: dict[str, str], name: str) -> None:
    git = GitRepo(str(repo), env=env)
    with pytest.raises(InvalidInput, match="branch name"):
        await git.checkout_branch(name)
    with pytest.raises(InvalidInput, match="branch name"):
        await git.add_worktree("wt", name)
    assert host_git(repo, "branch", "--format=%(refname:short)", env=env).split() == ["main"]


async def test_git_inherited_environment_cannot_redirect(
    repo: Path, env: dict[str, str], tmp_path: Path
) -> None:
    other = tmp_path / "other"
    other.mkdir()
    host_git(other, "init", "-q", env=env)
    git = GitRepo(str(repo), env={**env, "GIT_DIR": str(other / ".git"), "GIT_WORK_TREE": str(other)})
    (repo / "a").write_text("a")
    assert await git.dirty_files() == ["a"]


# --- branches and worktrees ----------------------------------------------------------------------------


async def test_checkout_branch(repo: Path, env: dict[str, str]) -> None:
    git = GitRepo(str(repo), env=env)
    assert await git.current_branch() == "main"
    await git.checkout_branch("prd/auth")
    assert await git.current_branch() == "prd/auth"
    await git.checkout_branch("prd/auth")  # already there: nothing to do
    await git.checkout_branch("main", create=False)
    assert await git.current_branch() == "main"
    await git.checkout_branch("prd/auth", create=False)  # exists now
    with pytest.raises(NotFound, match="no branch"):
        await git.checkout_branch("missing", create=False)
    host_git(repo, "checkout", "-q", "--detach", "HEAD", env=env)
    assert await git.current_branch() == ""


async def test_worktree_add_and_remove(repo: Path, env: dict[str, str], tmp_path: Path) -> None:
    git = GitRepo(str(repo), env=env)
    wt = repo / ".daedalus" / "worktrees" / "auth"
    await git.add_worktree(".daedalus/worktrees/auth", "prd/auth")
    assert (wt / "README").read_text() == "hello\n"
    # a worktree's git runs in the sandbox of the project root, where its git dir is
    assert await git.at(str(wt)).current_branch() == "prd/auth"
    assert await git.at(str(wt)).common_dir() == await git.common_dir() == str(repo / ".git")
    assert await git.dirty_files() == []  # the worktree lives under .daedalus/
    with pytest.raises(Conflict, match="another worktree"):
        await git.checkout_branch("prd/auth")
    with pytest.raises(Conflict, match="not empty"):
        await git.add_worktree(".daedalus/worktrees/auth", "prd/x")
    await git.remove_worktree(str(wt))
    assert not wt.exists()
    with pytest.raises(NotFound, match="not a worktree"):
        await git.remove_worktree(str(wt))
    with pytest.raises(NotFound, match="not a worktree"):
        await git.remove_worktree(str(repo))


async def test_removing_a_dirty_worktree_needs_the_capability(repo: Path, env: dict[str, str]) -> None:
    wt = repo / ".daedalus" / "worktrees" / "w"
    await GitRepo(str(repo), env=env).add_worktree(str(wt), "w")
    (wt / "work.txt").write_text("unsaved")
    for allow, force in ((False, False), (False, True), (True, False)):
        with pytest.raises(PermissionDenied, match=CAPABILITY) as info:
            await GitRepo(str(repo), env=env, allow_destructive=allow).remove_worktree(str(wt), force=force)
        assert info.value.details["capability"] == CAPABILITY
        assert info.value.details["files"] == ["work.txt"]
        assert (wt / "work.txt").exists()
    await GitRepo(str(repo), env=env, allow_destructive=True).remove_worktree(str(wt), force=True)
    assert not wt.exists()


async def test_git_failure_names_the_command_and_stderr(repo: Path, env: dict[str, str]) -> None:
    git = GitRepo(str(repo), env=env)
    with pytest.raises(GitError) as info:
        await git._git("no-such-command", "arg")
    assert info.value.details["command"] == ["no-such-command", "arg"]
    assert "no-such-command" in info.value.message and info.value.details["stderr"]
    assert info.value.type == "git_error"


async def test_git_stderr_is_capped(repo: Path, env: dict[str, str]) -> None:
    with pytest.raises(GitError) as info:
        await GitRepo(str(repo), env=env)._git("show", "x" * 5000)
    assert "x" * 100 in info.value.details["stderr"]  # git's own message, …
    assert len(info.value.details["stderr"]) <= STDERR_CAP + 10  # … capped
    assert len(info.value.message) < STDERR_CAP + 200


async def test_a_git_command_past_its_timeout_is_killed_with_its_children(
    repo: Path, env: dict[str, str]
) -> None:
    marker = f"jido-git-{uuid.uuid4().hex[:12]}"
    git = GitRepo(str(repo), env=env, timeout_s=0.5)
    # an alias of our own making (a repository's config cannot reach _git's arguments)
    with pytest.raises(RequestTimeout, match=r"did not finish within 0\.5 s"):
        await git._git("-c", f"alias.slow=!bash -c 'exec -a {marker} sleep 300'", "slow")
    assert not processes_with(marker)


async def test_a_project_in_a_subdirectory_of_a_repository_is_not_one(
    repo: Path, env: dict[str, str]
) -> None:
    # git runs in the project's sandbox, where only the project root is writable: the
    # repository must be the project's own, git never looks above the root (decision 0300)
    (repo / "proj" / ".daedalus").mkdir(parents=True)
    (repo / "proj" / "x.py").write_text("x")
    git = GitRepo(str(repo / "proj"), env=env)
    assert not await git.is_repo()
    with pytest.raises(NotFound, match="not a git working tree"):
        await git.commit_all("m")
    assert host_git(repo, "rev-list", "--count", "HEAD", env=env).strip() == "1"


async def test_names_that_are_not_utf8_and_lone_surrogates(repo: Path, env: dict[str, str]) -> None:
    (repo / os.fsdecode(b"bad-\xff.txt")).write_text("x")
    git = GitRepo(str(repo), env=env)
    assert await git.dirty_files() == ["bad-\\xff.txt"]
    commit = await git.commit_all("lone \ud800 surrogate")
    assert commit is not None and commit.files == ["bad-\\xff.txt"]
    assert commit.message == "lone ? surrogate\n"
    commit.message.encode()  # JSON-safe text


_ENTRY = st.tuples(
    st.sampled_from([" M", "M ", "A ", "D ", "??", "R ", "C ", "RM", "UU"]),
    st.text(st.characters(exclude_characters="\0", exclude_categories=("Cs",)), min_size=1, max_size=12),
    st.text(st.characters(exclude_characters="\0", exclude_categories=("Cs",)), min_size=1, max_size=12),
)


@given(st.lists(_ENTRY, max_size=8))
def test_parse_porcelain_property(entries: list[tuple[str, str, str]]) -> None:
    data = b""
    expected: set[str] = set()
    for xy, path, orig in entries:
        data += f"{xy} {path}\0".encode()
        expected.add(path)
        if "R" in xy or "C" in xy:
            data += f"{orig}\0".encode()
            expected.add(orig)
    assert parse_porcelain(data) == sorted(expected)


_MESSAGE = st.text(
    st.characters(exclude_characters="\0", exclude_categories=("Cs",)), min_size=1, max_size=200
).filter(str.strip)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(message=_MESSAGE)
def test_any_message_is_committed_byte_for_byte(repo: Path, env: dict[str, str], message: str) -> None:
    async def commit() -> Commit | None:
        (repo / "f").write_text(uuid.uuid4().hex)
        return await GitRepo(str(repo), env=env).commit_all(message)

    made = asyncio.run(commit())
    assert made is not None
    body = subprocess.run(
        ["git", "-C", str(repo), "cat-file", "commit", made.sha], capture_output=True, check=True, env=env
    ).stdout.split(b"\n\n", 1)[1]
    assert body == (message if message.endswith("\n") else message + "\n").encode()
