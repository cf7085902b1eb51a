"""The official MCP JS SDK for the contract tests: found or installed once per session, or a skip saying why.

``JIDO_MCP_JS_SDK`` may name a ``node_modules`` folder that holds ``@modelcontextprotocol/sdk``;
otherwise npm installs the SDK (major 1) into a temporary folder. Without node or npm, or when
the install fails (no registry), the tests that need it skip with the reason.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from tests.contract.js_packages import node_with_package

__all__ = ["DRIVER", "JsSdk", "js_sdk"]

#: The driver script: the JS SDK's ``Client`` over stdio, one JSON line per step.
DRIVER = Path(__file__).with_name("mcp_js_client.mjs")
SDK_PACKAGE = "@modelcontextprotocol/sdk@^1.20"


class JsSdk:
    """Where node and the SDK are: runs the driver."""

    def __init__(self, node: str, modules: Path) -> None:
        self.node = node
        self.modules = modules

    async def drive(self, command: list[str], env: dict[str, str], calls: list[dict[str, Any]]) -> list[Any]:
        """Run ``calls`` against the stdio server ``command``: each step's outcome, then the logs.

        A subprocess of this event loop's: the services the server talks to run in this loop too."""
        spec = {"command": command[0], "args": command[1:], "env": env, "calls": calls}
        proc = await asyncio.create_subprocess_exec(
            self.node,
            str(DRIVER),
            str(self.modules),
            json.dumps(spec),
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        async with asyncio.timeout(600):
            out, err = await proc.communicate()
        assert proc.returncode == 0, f"the JS driver failed ({proc.returncode}): {err.decode()[-4000:]}"
        return [json.loads(line) for line in out.decode().splitlines() if line.startswith("{")]


@pytest.fixture(scope="session")
def js_sdk(tmp_path_factory: pytest.TempPathFactory) -> JsSdk:
    """The JS SDK, or a skip naming what is missing."""
    node, modules = node_with_package(SDK_PACKAGE, "JIDO_MCP_JS_SDK", tmp_path_factory, "MCP JS SDK")
    return JsSdk(node, modules)
