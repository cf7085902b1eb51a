"""Attacks that need the tools to run: symlink escapes and races, orphans, oversize input."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from jidocode.services.tool_runner import fsops
from jidocode.services.tool_runner.executor import Limits, execute, run_authorized
from jidocode.shared.errors import PermissionDenied
from jidocode.shared.policy import Effect, Policy, authorize


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    d = tmp_path / "outside"
    d.mkdir()
    (d / "secret.txt").write_text("top secret")
    return d


@pytest.fixture
def root(tmp_path: Path) -> Path:
    proj = tmp_path / "proj"
    (proj / "src").mkdir(parents=True)
    return proj


@pytest.fixture
def policy(root: Path) -> Policy:
    return Policy.build(str(root), allow=["Read", "Edit", "Bash(sleep:*)", "Bash(echo:*)"])


async def test_symlink_file_escape_read(policy: Policy, root: Path, outside: Path) -> None:
    os.symlink(outside / "secret.txt", root / "innocent.txt")
    r = await execute(policy, "read_file", {"path": "innocent.txt"})
    assert r.error is not None and r.error.type == "permission_denied"
    assert "outside the project root" in r.error.message


async def test_symlink_dir_escape_write(policy: Policy, root: Path, outside: Path) -> None:
    os.symlink(outside, root / "src" / "out")
    r = await execute(policy, "write_file", {"path": "src/out/pwned.txt", "content": "x"})
    assert r.error is not None and r.error.type == "permission_denied"
    assert not (outside / "pwned.txt").exists()


async def test_symlink_into_git_hooks_is_protected(policy: Policy, root: Path) -> None:
    (root / ".git" / "hooks").mkdir(parents=True)
    os.symlink(root / ".git" / "hooks", root / "notes")
    r = await execute(policy, "write_file", {"path": "notes/pre-commit", "content": "curl evil"})
    assert r.error is not None and r.error.type == "permission_denied"
    assert not (root / ".git" / "hooks" / "pre-commit").exists()


async def test_symlink_swapped_after_check_cannot_redirect_write(
    policy: Policy, root: Path, outside: Path
) -> None:
    (root / "src" / "d").mkdir()
    decision = authorize(policy, "write_file", {"path": "src/d/f.txt"})
    assert decision.effect is Effect.ALLOW
    # the race: after the check, the directory becomes a symlink to the outside
    os.rename(root / "src" / "d", root / "src" / "d-old")
    os.symlink(outside, root / "src" / "d")
    with pytest.raises(PermissionDenied, match="symlink"):
        await run_authorized(
            policy, "write_file", {"path": "src/d/f.txt", "content": "x"}, decision, Limits()
        )
    assert not (outside / "f.txt").exists()


async def test_symlink_swapped_file_after_check_cannot_redirect_read(
    policy: Policy, root: Path, outside: Path
) -> None:
    (root / "src" / "f.txt").write_text("fine")
    decision = authorize(policy, "read_file", {"path": "src/f.txt"})
    (root / "src" / "f.txt").unlink()
    os.symlink(outside / "secret.txt", root / "src" / "f.txt")
    with pytest.raises(PermissionDenied, match="symlink"):
        await run_authorized(policy, "read_file", {"path": "src/f.txt"}, decision, Limits())


def test_fsops_refuses_symlinked_component(root: Path, outside: Path) -> None:
    os.symlink(outside, root / "link")
    with pytest.raises(PermissionDenied):
        fsops.write_bytes(str(root), str(root / "link" / "x"), b"x")
    assert not (outside / "x").exists()


async def test_write_replaces_hardlink_instead_of_writing_through(
    policy: Policy, root: Path, outside: Path
) -> None:
    os.link(outside / "secret.txt", root / "hard.txt")
    r = await execute(policy, "write_file", {"path": "hard.txt", "content": "overwritten"})
    assert r.ok
    assert (outside / "secret.txt").read_text() == "top secret"


async def test_oversize_arguments_rejected_before_running(policy: Policy, root: Path) -> None:
    r = await execute(
        policy, "write_file", {"path": "big.txt", "content": "x" * 2000}, limits=Limits(max_args_bytes=1024)
    )
    assert r.error is not None and r.error.type == "payload_too_large"
    assert not (root / "big.txt").exists()


async def test_non_object_arguments(policy: Policy) -> None:
    r = await execute(policy, "read_file", ["a"])  # type: ignore[arg-type]
    assert r.error is not None and r.error.type == "invalid_input"


def _live(marker: str) -> list[int]:
    pids = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
            with open(f"/proc/{pid}/stat") as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if marker in cmd and state != "Z":
            pids.append(int(pid))
    return pids


async def _gone(marker: str) -> bool:
    """True once no live process carries ``marker`` (allowing the kernel to finish a SIGKILL).

    An orphan would live for the full ``sleep`` (90+ s); the 5 s bound only
    absorbs the instant between a killed process closing its files and
    becoming a zombie.
    """

    async def poll() -> None:
        while _live(marker):  # noqa: ASYNC110
            await asyncio.sleep(0.01)  # /proc has no change notification

    try:
        await asyncio.wait_for(poll(), 5)
    except TimeoutError:
        return False
    return True


async def test_timeout_leaves_no_orphan(policy: Policy) -> None:
    marker = f"97.{os.getpid()}1"
    r = await execute(
        policy,
        "bash",
        {"command": f"sleep {marker} & sleep {marker} & sleep {marker}"},
        limits=Limits(timeout_s=0.5),
    )
    assert r.error is not None and r.error.type == "timeout"
    assert await _gone(f"sleep {marker}")


async def test_background_child_killed_when_shell_exits(policy: Policy) -> None:
    marker = f"98.{os.getpid()}2"
    r = await execute(policy, "bash", {"command": f"sleep {marker} & echo started"})
    assert r.ok and "started" in r.data["output"]
    assert await _gone(f"sleep {marker}")


async def test_cancellation_kills_the_group(policy: Policy) -> None:
    marker = f"99.{os.getpid()}3"
    task = asyncio.create_task(
        execute(policy, "bash", {"command": f"sleep {marker}"}, limits=Limits(timeout_s=60))
    )

    async def started() -> None:
        while not _live(f"sleep {marker}"):  # noqa: ASYNC110
            await asyncio.sleep(0.01)  # /proc has no change notification

    await asyncio.wait_for(started(), 10)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert await _gone(f"sleep {marker}")
