"""What only bubblewrap gives: its own /proc, protected paths as mount points that cannot be
unmounted or moved, no nested user namespaces. Skipped (with the reason) where bubblewrap cannot run."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from jidocode.shared import sandbox
from jidocode.shared.policy import Policy
from tests.security.sandbox_support import make_project, output, sh, skip_unless, write_global


@pytest.fixture
def policy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Policy:
    skip_unless("bubblewrap")
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    jido_home = tmp_path / "jido_home"
    write_global(jido_home, {"mode": "bubblewrap"})
    root = make_project(tmp_path / "proj")
    return Policy.build(str(root), jido_home=str(jido_home), home=str(home))


async def test_the_command_sees_only_its_own_processes(policy: Policy) -> None:
    text = output(await sh(policy, "ls /proc | grep -c '^[0-9]'; tr '\\0' ' ' < /proc/1/cmdline; echo"))
    count, init = text.splitlines()[:2]
    assert int(count) < 10  # bubblewrap's init, bash, ls, grep … — not the host's processes
    assert "bwrap" in init


async def test_protected_mounts_cannot_be_unmounted(policy: Policy) -> None:
    root = Path(policy.root)
    r = await sh(
        policy, "umount .git/hooks; umount -l .git/hooks; echo evil > .git/hooks/pre-commit; echo done"
    )
    assert "done" in output(r)
    assert not (root / ".git" / "hooks" / "pre-commit").exists()


async def test_git_cannot_be_moved_away(policy: Policy) -> None:
    root = Path(policy.root)
    r = await sh(policy, "mv .git .git-away; rm -rf .git; ls -d .git .git-away 2>&1; echo done")
    # rm -rf empties the mount point: what makes it a repository is put back, the call is stopped
    assert r.error is not None, r
    assert {".git/HEAD", ".git/objects", ".git/refs"} & set(r.error.details["protected_restored"]), r
    assert (root / ".git" / "config").is_file() and not (root / ".git-away").exists()


async def test_no_user_namespace_inside(policy: Policy) -> None:
    if not sandbox.detect().bwrap_disable_userns:
        pytest.skip("this bubblewrap cannot forbid user namespaces (--disable-userns needs 0.8)")
    r = await sh(policy, "unshare -Ur true && echo NESTED; echo done")
    assert "done" in output(r) and "NESTED" not in output(r)


async def test_a_protected_path_that_is_a_link_is_bound_where_it_leads(policy: Policy) -> None:
    root = Path(policy.root)
    (root / "docs" / "claude").mkdir(parents=True)
    (root / "docs" / "claude" / "settings.json").write_text("{}")
    os.symlink("docs/claude", root / ".claude")
    await sh(policy, "echo evil > .claude/settings.json; echo evil > docs/claude/hooks.json; echo done")
    assert (root / "docs" / "claude" / "settings.json").read_text() == "{}"
    assert not (root / "docs" / "claude" / "hooks.json").exists()
    assert os.readlink(root / ".claude") == "docs/claude"
