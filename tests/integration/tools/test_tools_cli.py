"""`jidocode tools list|run|policy` as a real process against the running services."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path

from jidocode.shared.config import Config
from tests.integration.tools.support import RunnerFactory, write_settings


async def jidocode(config: Config, *argv: str) -> tuple[int, str, str]:
    env = {**os.environ, "NATS_URL": config.nats_url, "JIDO_CODE_HOME": str(config.jido_home)}
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        "from jidocode.cli.main import app; app()",
        *argv,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


async def test_cli_list_and_run(stack: Config, runners: RunnerFactory, tmp_path: Path) -> None:
    await runners()
    (tmp_path / "README.md").write_text("hello from the readme\n")
    write_settings(tmp_path, {"permissions": {"allow": ["Read"], "ask": ["Bash(ls:*)"]}})

    code, out, _ = await jidocode(stack, "tools", "list", str(tmp_path), "--json")
    assert code == 0
    assert {s["name"] for s in json.loads(out)} == {
        "read_file",
        "list_dir",
        "glob",
        "grep",
        "bash",
        "web_fetch",
    }

    code, out, _ = await jidocode(
        stack, "tools", "run", str(tmp_path), "read_file", "--args", '{"path": "README.md"}'
    )
    assert code == 0
    assert json.loads(out)["data"]["content"] == "hello from the readme\n"

    code, out, _ = await jidocode(stack, "tools", "run", str(tmp_path), "bash", "--args", '{"command": "ls"}')
    assert code == 1
    result = json.loads(out)
    assert result["error"]["type"] == "permission_denied" and "no conversation" in result["error"]["message"]
