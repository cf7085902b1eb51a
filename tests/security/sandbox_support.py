"""Helpers of the OS sandbox tests: projects with protected paths, canaries, running bash unauthorized.

The sandbox is judged alone here: :func:`sh` runs a command through the bash
tool *after* the policy (an allow decision is given), so whatever the word-level
policy would have caught, the OS sandbox must still hold.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from jidocode.services.tool_runner.executor import Limits, error_result, run_authorized
from jidocode.shared import sandbox
from jidocode.shared.errors import JidoError
from jidocode.shared.events.tools import ToolResult
from jidocode.shared.policy import Decision, Effect, Policy

MODES = ("bubblewrap", "landlock")
CANARY_SECRET = "canary-secret-7f3a9c"

#: Protected paths the fixture project has (with their content) and has not.
EXISTING = {
    ".git/config": None,  # written by git init
    ".jido/settings.json": '{"permissions": {}}\n',
    ".vscode/tasks.json": '{"tasks": []}\n',
    ".mcp.json": '{"mcpServers": {}}\n',
}
MISSING = (
    ".envrc",
    ".github/workflows/evil.yml",
    ".husky/pre-commit",
    ".claude/settings.json",
    ".git/commondir",
)


def skip_unless(mode: str) -> None:
    """Skip (with the reason) when this machine cannot run ``mode``, or the environment forces
    another one (``JIDO_SANDBOX_MODE``, the Landlock pass of ``.ci/run``)."""
    forced = sandbox.forced_mode()
    if forced not in (None, "auto", mode):
        pytest.skip(f"{sandbox.MODE_ENV}={forced} forces another sandbox than {mode}")
    caps = sandbox.detect()
    if mode == "bubblewrap" and not caps.bwrap:
        pytest.skip(f"bubblewrap cannot run here: {caps.bwrap_problem}")
    if mode == "landlock" and not caps.landlock_abi:
        pytest.skip(f"Landlock is not available here: {caps.landlock_problem}")


def write_global(jido_home: Path, sandbox_settings: dict[str, Any], **other: Any) -> None:
    """The user's global settings.json: its ``sandbox`` section and any ``other`` sections."""
    jido_home.mkdir(parents=True, exist_ok=True)
    (jido_home / "settings.json").write_text(json.dumps({"sandbox": sandbox_settings, **other}))


def make_project(root: Path) -> Path:
    """A git repository with some protected paths present (and the others absent)."""
    root.mkdir(parents=True, exist_ok=True)
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    for rel, text in EXISTING.items():
        if text is not None:
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            (root / rel).write_text(text)
    (root / "src").mkdir()
    (root / "src" / "main.py").write_text("print('hello')\n")
    return root


def git(root: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    """git on the host (outside any sandbox) in ``root``."""
    return subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, check=check)


def tree_state(root: Path, rels: list[str]) -> dict[str, Any]:
    """What each path is (missing, link target, file bytes, dir listing), without following links."""
    out: dict[str, Any] = {}
    for rel in rels:
        p = root / rel
        if p.is_symlink():
            out[rel] = ("link", os.readlink(p))
        elif p.is_file():
            out[rel] = ("file", p.read_bytes())
        elif p.is_dir():
            out[rel] = ("dir", sorted(x.name for x in p.iterdir()))
        else:
            out[rel] = None
    return out


async def sh(policy: Policy, command: str, *, timeout_s: float = 30.0) -> ToolResult:
    """Run ``command`` with the bash tool as if the policy had allowed it."""
    allow = Decision(effect=Effect.ALLOW, reason="the OS sandbox alone is judged")
    try:
        return await run_authorized(policy, "bash", {"command": command}, allow, Limits(timeout_s=timeout_s))
    except (JidoError, OSError, TimeoutError) as exc:
        return error_result(exc)


def output(result: ToolResult) -> str:
    assert result.ok, result
    return str(result.data["output"])


def processes_with(marker: str) -> list[int]:
    """Live (not zombie) processes whose command line holds ``marker``."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
            state = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[-1].split()[0]
        except OSError:
            continue
        if marker.encode() in cmdline and state != "Z":
            found.append(int(entry))
    return found
