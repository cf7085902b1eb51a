"""Running MCP servers in the tests: a Python the OS sandbox can start, and ``.mcp.json`` entries."""

from __future__ import annotations

import json
import os
import sys
import sysconfig
from pathlib import Path
from typing import Any

import pytest

#: The tests' own misbehaving server (mcp_test_server.py).
FLAKY = str(Path(__file__).with_name("mcp_test_server.py"))


def sandbox_python() -> tuple[str, dict[str, str]]:
    """A Python the sandbox can run (the home is hidden there) and the environment that finds the
    test environment's packages (``mcp``, ``mcp_server_time``, ``mcp_server_git``)."""
    site = sysconfig.get_paths()["purelib"]
    home = os.path.realpath(os.path.expanduser("~"))
    if os.path.realpath(site).startswith(home + os.sep):
        pytest.skip(f"the test environment's packages ({site}) are under the home, hidden by the sandbox")
    exe = os.path.realpath(sys.executable)
    if exe.startswith(home + os.sep):
        exe = f"/usr/bin/python{sys.version_info.major}.{sys.version_info.minor}"
        if not os.path.exists(exe):
            pytest.skip("no Python outside the home for the sandbox to run")
    return exe, {"PYTHONPATH": site}


def sandbox_readable() -> list[str]:
    """What the sandbox must let the tests' servers read besides the system folders: the test
    environment's packages and the tests' own server. Both may lie under a folder the sandbox
    hides (a checkout in /tmp, whose /tmp is private in there), so the tests name them in the
    global layer's ``permissions.additional_directories`` (read-only), as a user would."""
    site = sysconfig.get_paths()["purelib"]
    return sorted({os.path.realpath(site), os.path.realpath(os.path.dirname(FLAKY))})


def stdio(*args: str, env: dict[str, str] | None = None) -> dict[str, Any]:
    """A ``.mcp.json`` stdio entry running ``python <args>`` in the sandbox."""
    exe, base = sandbox_python()
    return {"command": exe, "args": list(args), "env": {**base, **(env or {})}}


def write_mcp_json(where: Path, servers: dict[str, Any]) -> None:
    where.mkdir(parents=True, exist_ok=True)
    (where / ".mcp.json").write_text(json.dumps({"mcpServers": servers}))
