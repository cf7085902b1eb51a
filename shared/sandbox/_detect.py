"""What this machine can run: a working bubblewrap, and the Landlock ABI (cached per process)."""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
from typing import Final

from pydantic import BaseModel, ConfigDict

from ._launcher import abi

__all__ = ["Capabilities", "detect"]

_PROBE_TIMEOUT_S: Final = 10.0


class Capabilities(BaseModel):
    """Which sandboxes work here, and why the others do not."""

    model_config = ConfigDict(frozen=True)

    #: The bubblewrap binary when it can build the sandbox here, else ``None``.
    bwrap: str | None = None
    #: Why bubblewrap cannot run (not installed, no user namespaces …); empty when it can.
    bwrap_problem: str = ""
    #: Whether this bubblewrap can forbid user namespaces inside the sandbox (``--disable-userns``, 0.8+).
    bwrap_disable_userns: bool = False
    #: The kernel's Landlock ABI version, ``0`` without Landlock.
    landlock_abi: int = 0
    landlock_problem: str = ""


def _probe_bwrap(path: str) -> tuple[str, bool]:
    """Run an empty sandbox with the options of a real one: ``("", disable_userns)`` when it works."""
    try:
        help_text = subprocess.run(
            [path, "--help"], capture_output=True, text=True, timeout=_PROBE_TIMEOUT_S, check=False
        ).stdout
    except (OSError, subprocess.SubprocessError) as exc:
        return f"{path} --help failed: {exc}", False
    disable_userns = "--disable-userns" in help_text
    argv = [path, "--unshare-all", "--unshare-user"]
    if disable_userns:
        argv.append("--disable-userns")
    argv += ["--cap-drop", "ALL", "--die-with-parent", "--new-session", "--ro-bind", "/", "/"]
    argv += ["--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp", "--", "/bin/true"]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=_PROBE_TIMEOUT_S, check=False)
    except (OSError, subprocess.SubprocessError) as exc:
        return f"bubblewrap did not run: {exc}", disable_userns
    if done.returncode != 0:
        why = done.stderr.strip().splitlines()[-1:] or [f"exit status {done.returncode}"]
        return f"bubblewrap cannot build a sandbox here: {why[0]}", disable_userns
    return "", disable_userns


@functools.cache
def _detect() -> Capabilities:
    path = shutil.which("bwrap")
    if path is None:
        bwrap, problem, disable_userns = None, "bubblewrap is not installed (no bwrap on PATH)", False
    else:
        problem, disable_userns = _probe_bwrap(path)
        bwrap = None if problem else path
    version = abi()
    if version:
        landlock_problem = ""
    elif not os.path.exists("/sys/kernel/security/lsm") and not os.path.exists("/proc/self"):
        landlock_problem = "not Linux"
    else:
        landlock_problem = "the kernel has no Landlock (needs Linux >= 5.13 with landlock in the LSM list)"
    return Capabilities(
        bwrap=bwrap,
        bwrap_problem=problem,
        bwrap_disable_userns=disable_userns,
        landlock_abi=version,
        landlock_problem=landlock_problem,
    )


def detect(*, refresh: bool = False) -> Capabilities:
    """The sandboxes this machine can run (probed once per process; ``refresh`` probes again)."""
    if refresh:
        _detect.cache_clear()
    return _detect()
