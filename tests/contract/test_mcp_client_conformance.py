"""The MCP conformance suite's client scenarios against the tool runner's MCP client.

The suite (npm ``@modelcontextprotocol/conformance``) starts each scenario's server and runs
``tests/contract/mcp_client_conformance.py`` on it: the runner's real connection, OAuth and login
code. These are the scenarios that pass (``docs/mcp-servers.md``, "Conformance", lists every one
and why the others do not apply), so a regression shows.

The suite needs Node >= 22 and about a minute and a half, so it runs only when asked:
``JIDO_MCP_CONFORMANCE`` names a ``node_modules`` folder holding the package, and
``JIDO_NODE22`` a node of version 22 or later (else the ``node`` on the ``PATH``, when it is one)::

    npm install --prefix /tmp/mcpc node@22 @modelcontextprotocol/conformance@0.1.16
    JIDO_MCP_CONFORMANCE=/tmp/mcpc/node_modules JIDO_NODE22=/tmp/mcpc/node_modules/.bin/node \\
        .venv/bin/python -m pytest -n 0 tests/contract/test_mcp_client_conformance.py

Without them every test skips, saying which is missing.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import pytest

pytestmark = pytest.mark.slow

REPO: Final = Path(__file__).resolve().parents[2]
PACKAGE: Final = "@modelcontextprotocol/conformance"
#: The client scenarios of the suite (0.1.16) the tool runner's client passes.
PASSING: Final = (
    "initialize",
    "tools_call",
    "elicitation-sep1034-client-defaults",
    "sse-retry",
    "auth/metadata-default",
    "auth/metadata-var1",
    "auth/metadata-var2",
    "auth/metadata-var3",
    "auth/scope-from-www-authenticate",
    "auth/scope-from-scopes-supported",
    "auth/scope-omitted-when-undefined",
    "auth/scope-step-up",
    "auth/scope-retry-limit",
    "auth/token-endpoint-auth-basic",
    "auth/token-endpoint-auth-post",
    "auth/token-endpoint-auth-none",
    "auth/pre-registration",
    "auth/2025-03-26-oauth-endpoint-fallback",
    "auth/resource-mismatch",
    "auth/offline-access-scope",
    "auth/offline-access-not-supported",
)
SCENARIO_TIMEOUT_S: Final = 300


@dataclass(frozen=True)
class Suite:
    node: str
    entry: Path


def _node() -> str | None:
    """A node of version 22 or later: ``JIDO_NODE22``, else the ``PATH``'s when it is one."""
    node = os.environ.get("JIDO_NODE22") or shutil.which("node")
    if node is None:
        return None
    version = subprocess.run([node, "--version"], capture_output=True, text=True, timeout=60, check=False)
    major = re.match(r"v(\d+)\.", version.stdout.strip())
    return node if major is not None and int(major.group(1)) >= 22 else None


@pytest.fixture(scope="module")
def suite() -> Suite:
    """Node >= 22 and the suite's entry point, or a skip naming what is missing."""
    modules = os.environ.get("JIDO_MCP_CONFORMANCE")
    if not modules:
        pytest.skip(f"JIDO_MCP_CONFORMANCE does not name a node_modules folder holding {PACKAGE}")
    entry = Path(modules) / PACKAGE / "dist" / "index.js"
    if not entry.is_file():
        pytest.skip(f"no {PACKAGE} under {modules} ({entry} is missing)")
    node = _node()
    if node is None:
        pytest.skip("the conformance suite needs Node >= 22: set JIDO_NODE22 to one")
    return Suite(node, entry)


@pytest.mark.parametrize("scenario", PASSING)
def test_the_client_passes_the_scenario(suite: Suite, scenario: str, tmp_path: Path) -> None:
    command = f"{sys.executable} -m tests.contract.mcp_client_conformance"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run(
        [suite.node, str(suite.entry), "client", "--scenario", scenario, "--command", command],
        cwd=tmp_path,  # the suite writes its results/ folder here
        env=env,
        capture_output=True,
        text=True,
        timeout=SCENARIO_TIMEOUT_S,
        check=False,
    )
    out = done.stdout + done.stderr
    assert "OVERALL: PASSED" in out, f"{scenario} did not pass:\n{out[-6000:]}"
