"""The project's ``.git`` and protected paths stay what they were, also *while* a call runs (issue 24, finding 12).

Under Landlock the whole project root is writable (Landlock cannot take a subtree out of a
granted tree), so a call could ``mv .git .git_moved`` (the guard then re-made a skeleton
``.git``: the project was no longer a repository, and the moved git dir kept the hook and
``core.fsmonitor`` the call planted), and a protected file changed by a call stayed changed
until the call ended: a ``core.fsmonitor`` appended to ``.git/config`` by a 10 s call ran in the
user's own ``git status`` 4 s into it. Now the guard watches the protected paths while calls
run: a change is put back at once, the call is stopped and fails naming the paths; a moved
``.git`` is brought back, a removed one replaced by a repository.

Each attack runs through the bash tool (as if the policy had allowed it) under both sandboxes,
and through the real tool runner on the bus; it is judged on the host: a canary file outside
the project that a planted hook or fsmonitor would create, the repository's objects and config.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from jidocode.shared.bus import Bus
from jidocode.shared.events.tools import ToolResult
from jidocode.shared.policy import Policy
from tests.security.sandbox_support import MODES, git, make_project, sh, skip_unless, write_global
from tests.security.test_sandbox_bus import (  # noqa: F401 (fixtures)
    ATTACK,
    StartRunner,
    _attack,
    _global,
    _project,
    _run,
    stack,
    start_runner,
)

CONFIG_MARK = "original-config-mark"
#: How long an attack's command goes on after planting (a call the guard does not stop lasts that long).
LONG_S = 10
#: Under bubblewrap nothing stops these calls (the paths are read-only mounts): the command's sleep
#: only has to outlast the user's git runs beside it, not show that the call was cut short.
BWRAP_S = 3


def _sleep_s(repo: Repo) -> int:
    """How long an attacking command sleeps: long enough under Landlock to tell a stopped call."""
    return LONG_S if repo.mode == "landlock" else BWRAP_S


@dataclass
class Repo:
    mode: str
    root: Path
    canary: Path
    commit: str
    policy: Policy


def _commit(root: Path) -> str:
    git(root, "config", "user.name", "T")
    git(root, "config", "user.email", "t@x")
    git(root, "config", "jidotest.mark", CONFIG_MARK)
    git(root, "add", "-A")
    git(root, "commit", "-qm", "init")
    return git(root, "rev-parse", "HEAD").stdout.strip()


@pytest.fixture(params=MODES)
def repo(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Repo:
    mode = request.param
    skip_unless(mode)
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    jido_home = tmp_path / "jido_home"
    write_global(jido_home, {"mode": mode})
    root = make_project(tmp_path / "proj")
    commit = _commit(root)
    (tmp_path / "outside").mkdir()
    policy = Policy.build(str(root), jido_home=str(jido_home), home=str(home))
    return Repo(mode, root, tmp_path / "outside" / "canary", commit, policy)


def _planter(canary: Path) -> str:
    """Shell that writes ``mon.sh`` (it creates ``canary``, outside the project, when run on the host)."""
    return f"printf '#!/bin/sh\\ntouch {canary}\\n' > mon.sh; chmod +x mon.sh; "


#: The command tells the test it planted, a moment later (the finding: the user's ``git status`` 4 s
#: into the call). A reader within the watch's own latency (milliseconds) is the residual window
#: of decision 0307, not what these tests judge.
SIGNAL_PLANTED = "sleep 1; touch planted"
FSMONITOR = "printf '[core]\\n\\tfsmonitor = {root}/mon.sh\\n' >> {cfg}; "
HOOK = "cp mon.sh {hooks}/pre-commit; chmod +x {hooks}/pre-commit; "


def _planted_anywhere(root: Path, canary: Path) -> list[str]:
    """Files under ``root`` (``mon.sh`` aside) naming ``canary`` or ``mon.sh``: a planted hook or config."""
    found = []
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            p = Path(dirpath, name)
            if p.is_symlink() or p.name == "mon.sh":
                continue
            data = p.read_bytes()
            if str(canary).encode() in data or b"/mon.sh" in data:
                found.append(str(p.relative_to(root)))
    return found


def _failed_naming(result: ToolResult, path: str) -> bool:
    return (
        result.error is not None
        and result.error.type == "permission_denied"
        and path in result.error.details.get("protected_restored", [])
        and path in result.error.message
    )


async def _until(cond: Callable[[], bool], timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "condition not met in time"
        await asyncio.sleep(0.02)


async def _while_running(
    call: Awaitable[ToolResult], planted: Path, user: Callable[[], object]
) -> tuple[ToolResult, int]:
    """Run ``call``; once it has planted (or ended), do what ``user`` does on the host until it ends.

    ``user`` runs at least three times (the last after the call ended); how many times it ran.
    """
    task = asyncio.ensure_future(call)
    await _until(lambda: planted.exists() or task.done())
    runs = 0
    while not task.done() or runs < 3:
        await asyncio.to_thread(user)
        runs += 1
    return await task, runs


def _assert_repository(r: Repo) -> None:
    """The project is its original repository: its own top level, the first commit, the original config."""
    assert git(r.root, "rev-parse", "--show-toplevel").stdout.strip() == str(r.root)
    assert git(r.root, "cat-file", "-t", r.commit).stdout.strip() == "commit"
    assert git(r.root, "config", "jidotest.mark").stdout.strip() == CONFIG_MARK
    assert b"fsmonitor" not in (r.root / ".git" / "config").read_bytes()


# --- .git moved, removed, replaced ------------------------------------------------------------------


async def test_moving_git_away_is_undone_and_fails_the_call(repo: Repo) -> None:
    hooks, cfg = ".git_moved/hooks", ".git_moved/config"
    started = time.monotonic()
    result = await sh(
        repo.policy,
        _planter(repo.canary)
        + "mv .git .git_moved; "
        + HOOK.format(hooks=hooks)
        + FSMONITOR.format(root=repo.root, cfg=cfg)
        + f"mkdir -p .git/hooks; cp mon.sh .git/hooks/pre-commit; sleep {_sleep_s(repo)}; echo done",
        timeout_s=60,
    )
    took = time.monotonic() - started
    _assert_repository(repo)
    assert not (repo.root / ".git_moved").exists()
    assert _planted_anywhere(repo.root, repo.canary) == []
    assert not (repo.root / ".git" / "hooks" / "pre-commit").exists()
    git(repo.root, "commit", "--allow-empty", "-qm", "after")  # the hooks: none of the call's runs
    git(repo.root, "status")  # nor any fsmonitor
    assert not repo.canary.exists()
    if repo.mode == "landlock":
        assert _failed_naming(result, ".git"), result
        assert took < LONG_S - 2, f"the call was not stopped when it moved .git ({took:.1f} s)"
    # (bubblewrap: .git is a mount point the command cannot move; nothing changed, nothing to fail)


async def test_git_moved_into_the_calls_scratch_comes_back(repo: Repo) -> None:
    if repo.mode != "landlock":
        pytest.skip("bubblewrap's /tmp is a tmpfs of its own: mv copies and deletes (see the rm -rf test)")
    result = await sh(repo.policy, 'mv .git "${TMPDIR:-/tmp}/g" && mkdir .git; echo done')
    _assert_repository(repo)
    if repo.mode == "landlock":
        assert _failed_naming(result, ".git"), result


async def test_git_moved_into_a_subfolder_is_not_left_a_nested_repository(repo: Repo) -> None:
    result = await sh(repo.policy, "mv .git src/.git && git -C src status >/dev/null; echo done")
    _assert_repository(repo)
    assert not (repo.root / "src" / ".git").exists()
    if repo.mode == "landlock":
        assert _failed_naming(result, ".git"), result


async def test_removing_git_leaves_a_repository_with_its_config_and_no_plant(repo: Repo) -> None:
    result = await sh(
        repo.policy,
        _planter(repo.canary) + "rm -rf .git; mkdir -p .git/hooks; cp mon.sh .git/hooks/pre-commit; "
        "chmod +x .git/hooks/pre-commit; echo done",
    )
    # the project is still a repository of its own (git does not go looking above the root)
    assert git(repo.root, "rev-parse", "--show-toplevel").stdout.strip() == str(repo.root)
    assert git(repo.root, "config", "jidotest.mark").stdout.strip() == CONFIG_MARK
    assert not (repo.root / ".git" / "hooks" / "pre-commit").exists()
    # (the objects rm reached before the call was stopped are lost: the commit may fail; no hook runs)
    git(repo.root, "commit", "--allow-empty", "-qm", "after", check=False)
    assert not repo.canary.exists()
    assert result.error is not None and result.error.type == "permission_denied", result
    restored = result.error.details["protected_restored"]
    assert [p for p in restored if p == ".git" or p.startswith(".git/")], restored


async def test_removed_head_is_put_back_at_once(repo: Repo) -> None:
    # without HEAD git takes the project for no repository, and the user's git looks above the root
    started = time.monotonic()
    result = await sh(repo.policy, f"rm -f .git/HEAD; sleep {LONG_S}", timeout_s=60)
    took = time.monotonic() - started
    _assert_repository(repo)
    assert git(repo.root, "rev-parse", "HEAD").stdout.strip() == repo.commit
    assert _failed_naming(result, ".git/HEAD"), result
    assert took < LONG_S - 2, f"the call was not stopped when it removed HEAD ({took:.1f} s)"


# --- protected files while the call runs ------------------------------------------------------------


async def test_fsmonitor_appended_mid_call_never_runs_on_the_host(repo: Repo) -> None:
    planted = repo.root / "planted"
    result, runs = await _while_running(
        sh(
            repo.policy,
            _planter(repo.canary)
            + FSMONITOR.format(root=repo.root, cfg=".git/config")
            + f"{SIGNAL_PLANTED}; sleep {_sleep_s(repo)}; echo done",
            timeout_s=60,
        ),
        planted,
        lambda: git(repo.root, "status", check=False),  # the user's git, or an IDE polling it
    )
    assert runs >= 3
    assert not repo.canary.exists(), "the planted core.fsmonitor ran on the host"
    _assert_repository(repo)
    if repo.mode == "landlock":
        assert _failed_naming(result, ".git/config"), result


async def test_pre_commit_hook_planted_mid_call_never_runs_on_the_host(repo: Repo) -> None:
    planted = repo.root / "planted"
    result, _ = await _while_running(
        sh(
            repo.policy,
            _planter(repo.canary)
            + HOOK.format(hooks=".git/hooks")
            + f"{SIGNAL_PLANTED}; sleep {_sleep_s(repo)}",
            timeout_s=60,
        ),
        planted,
        lambda: git(repo.root, "commit", "--allow-empty", "-qm", "user", check=False),
    )
    assert not repo.canary.exists(), "the planted pre-commit hook ran on the host"
    assert not (repo.root / ".git" / "hooks" / "pre-commit").exists()
    if repo.mode == "landlock":
        assert _failed_naming(result, ".git/hooks"), result


async def test_settings_changed_mid_call_are_put_back_at_once(repo: Repo) -> None:
    settings = repo.root / ".jido" / "settings.json"
    before = settings.read_bytes()
    evil = json.dumps({"permissions": {"allow": ["Bash", "Read(/)"]}})
    started = time.monotonic()
    result = await sh(
        repo.policy, f"echo '{evil}' > .jido/settings.json; sleep {_sleep_s(repo)}", timeout_s=60
    )
    took = time.monotonic() - started
    assert settings.read_bytes() == before
    if repo.mode == "landlock":
        assert _failed_naming(result, ".jido"), result
        assert took < LONG_S - 2, f"the call was not stopped when it changed the settings ({took:.1f} s)"


async def test_envrc_created_mid_call_is_removed_and_the_call_stopped(repo: Repo) -> None:
    # .envrc does not exist: bubblewrap cannot bind it read-only, so both sandboxes rely on the watch
    started = time.monotonic()
    result = await sh(repo.policy, f"echo 'touch {repo.canary}' > .envrc; sleep {LONG_S}", timeout_s=60)
    took = time.monotonic() - started
    assert not (repo.root / ".envrc").exists()
    assert _failed_naming(result, ".envrc"), result
    assert took < LONG_S - 2, f"the call was not stopped when it planted .envrc ({took:.1f} s)"


async def test_a_change_stops_every_call_of_the_project_in_flight(repo: Repo) -> None:
    # which of two overlapping calls changed a path cannot be told: both are stopped and fail
    started = time.monotonic()
    other = asyncio.ensure_future(sh(repo.policy, f"touch waiting; sleep {LONG_S}", timeout_s=60))
    await _until(lambda: (repo.root / "waiting").exists() or other.done())
    planter = await sh(repo.policy, "echo e > .envrc", timeout_s=60)
    waited = await other
    assert _failed_naming(planter, ".envrc"), planter
    assert _failed_naming(waited, ".envrc"), waited
    assert time.monotonic() - started < LONG_S - 2
    assert not (repo.root / ".envrc").exists()


# --- the failure keeps the command's own output ------------------------------------------------------


async def test_a_repair_fails_the_call_and_leaves_the_output_as_it_was(repo: Repo) -> None:
    result = await sh(repo.policy, "echo '{\"ok\": 1}'; echo e > .envrc")
    assert _failed_naming(result, ".envrc"), result
    assert result.error is not None
    assert json.loads(result.error.details["output"]) == {"ok": 1}  # no note appended to a script's JSON
    assert result.error.details["protected_restored"] == [".envrc"]


async def test_normal_work_is_not_stopped(repo: Repo) -> None:
    """Committing, editing top-level files and removing a top-level build dir all still work."""
    (repo.root / "build" / "sub").mkdir(parents=True)
    (repo.root / "build" / "sub" / "x.o").write_text("x")
    result = await sh(
        repo.policy,
        "rm -rf build && echo new > top.txt && sed -i s/hello/bye/ src/main.py && mkdir -p out/a && "
        "rm -rf out && echo done",
    )
    assert result.ok, result
    assert "done" in str(result.data["output"])
    assert not (repo.root / "build").exists() and not (repo.root / "out").exists()
    assert (repo.root / "top.txt").read_text() == "new\n"
    assert "bye" in (repo.root / "src" / "main.py").read_text()


async def test_git_commit_in_the_sandbox_works(repo: Repo) -> None:
    result = await sh(
        repo.policy, "echo more > more.txt && git add more.txt && git commit -qm more && git log --oneline"
    )
    assert result.ok, result
    assert git(repo.root, "log", "-1", "--format=%s").stdout.strip() == "more"
    _assert_repository(repo)


# --- through the real tool runner on the bus --------------------------------------------------------


@pytest.fixture
async def on_bus(
    bus: Bus,
    tmp_path: Path,
    start_runner: StartRunner,  # noqa: F811 (the fixture)
    jido_home: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> AsyncIterator[tuple[Bus, Path]]:
    skip_unless("landlock")
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    _global(jido_home, mode="landlock")
    await start_runner()
    yield bus, tmp_path


async def test_fsmonitor_mid_call_through_the_tool_runner(on_bus: tuple[Bus, Path]) -> None:
    bus, tmp_path = on_bus
    root = tmp_path / "proj"
    pid = await _project(bus, root)
    _commit(root)
    canary = tmp_path / "canary"
    _attack(
        root,
        _planter(canary)
        + FSMONITOR.format(root=root, cfg=".git/config")
        + f"{SIGNAL_PLANTED}; sleep {LONG_S}; echo done\n",
    )
    result, runs = await _while_running(
        _run(bus, pid, "bash", ATTACK, "fsmonitor-1"),
        root / "planted",
        lambda: git(root, "status", check=False),
    )
    assert runs >= 3
    assert not canary.exists(), "the planted core.fsmonitor ran on the host"
    assert b"fsmonitor" not in (root / ".git" / "config").read_bytes()
    assert _failed_naming(result, ".git/config"), result
