"""``./dev --help`` (issue 25, points 4 and 7): the dev commands and every jidocode command with
its one-liner, read from the command table by the system's Python, so it needs no environment:
it runs here with a PATH that has no .venv and an empty HOME, and installs nothing."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from jidocode.cli.commands import TABLE

ROOT = Path(__file__).resolve().parents[2]


def test_dev_help_lists_the_dev_commands_and_the_jidocode_commands(tmp_path: Path) -> None:
    # a copy of the script beside the command table, without any .venv: help must not install one
    (tmp_path / "cli").mkdir()
    shutil.copy(ROOT / "dev", tmp_path / "dev")
    shutil.copy(ROOT / "cli" / "commands.py", tmp_path / "cli" / "commands.py")
    env = {
        "PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin",
        "HOME": str(tmp_path / "home"),
        "PYTHON": sys.executable,
    }
    proc = subprocess.run(
        ["bash", str(tmp_path / "dev"), "--help"], capture_output=True, text=True, timeout=120, env=env
    )
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    for dev_command in ("./dev up", "./dev test", "./dev check", "./dev <command>"):
        assert dev_command in out
    for name, _, summary in TABLE:
        assert f"  {name:<14} {summary}\n" in out, name
    assert sorted(os.listdir(tmp_path)) == ["cli", "dev"]  # no .venv, no stamp, no uv
    assert proc.stderr == ""
