"""What is particular to the Landlock path: /proc/<pid> closed, the ABI probe, and the refusal when a
protected path is too large to be kept by a snapshot. Skipped (with the reason) without Landlock."""

from __future__ import annotations

import ctypes
import os
from pathlib import Path

import pytest

from jidocode.shared import sandbox
from jidocode.shared.policy import Policy
from tests.security.sandbox_support import make_project, output, sh, skip_unless, write_global


@pytest.fixture
def policy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Policy:
    skip_unless("landlock")
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    jido_home = tmp_path / "jido_home"
    write_global(jido_home, {"mode": "landlock"})
    root = make_project(tmp_path / "proj")
    return Policy.build(str(root), jido_home=str(jido_home), home=str(home))


def test_abi_is_the_kernels() -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    expected = max(int(libc.syscall(444, None, ctypes.c_size_t(0), 1)), 0)
    assert sandbox.landlock_abi() == expected


async def test_other_processes_are_closed_but_system_files_readable(policy: Policy) -> None:
    me = os.getpid()
    text = output(
        await sh(
            policy,
            f"cat /proc/{me}/cmdline /proc/{me}/environ /proc/{me}/maps >/dev/null 2>&1 || echo CLOSED; "
            "ls /proc/self/fd >/dev/null 2>&1 || echo SELF-CLOSED; grep -c processor /proc/cpuinfo",
        )
    )
    assert "CLOSED" in text and "SELF-CLOSED" in text
    assert int(text.splitlines()[-1]) >= 1  # the control: /proc/cpuinfo is readable


async def test_a_protected_path_too_large_to_keep_refuses_the_call(policy: Policy) -> None:
    root = Path(policy.root)
    (root / ".jido" / "big.bin").write_bytes(b"\0" * (17 * 1024 * 1024))
    r = await sh(policy, "touch ran.txt")
    assert r.error is not None and r.error.type == "permission_denied"
    assert r.error.details.get("sandbox") == "protected_too_large"
    assert not (root / "ran.txt").exists()


async def test_the_command_writes_its_own_scratch_not_the_hosts_tmp(policy: Policy) -> None:
    text = output(await sh(policy, "echo x > $TMPDIR/f && echo $TMPDIR; echo y > /tmp/direct || echo DENIED"))
    scratch = text.splitlines()[0]
    assert scratch.startswith("/tmp/jidocode-sandbox-") and "DENIED" in text
    assert not Path(scratch).exists()  # removed with the call
