"""The official A2A JS SDK (``@a2a-js/sdk``) against the gateway: discovery from the base URL
with or without its trailing slash, ``SendMessage``, ``GetTask`` (the client's ``messageId`` in
the history), ``ListTasks`` and a failed call, through node (``a2a_js_client.mjs``).

``JIDO_A2A_JS_SDK`` may name a ``node_modules`` folder holding ``@a2a-js/sdk``; otherwise npm
installs it (major 1) into a temporary folder once per session. Without node or npm, or when the
install fails (no registry), the tests skip with the reason.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from jidocode.shared.envelope import new_id
from tests.contract.js_packages import node_with_package
from tests.integration.gateway.a2a_fixtures import A2ASystem, a2a_system

__all__ = ["a2a_system"]

pytestmark = [pytest.mark.slow, pytest.mark.asyncio(loop_scope="module")]

DRIVER = Path(__file__).with_name("a2a_js_client.mjs")
SDK_PACKAGE = "@a2a-js/sdk@^1.3"
#: The completed state in the JS SDK's enum (``TaskState.TASK_STATE_COMPLETED``).
COMPLETED = 3


@pytest.fixture(scope="session")
def a2a_js(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Path]:
    """``(node, node_modules)`` holding the A2A JS SDK, or a skip naming what is missing."""
    return node_with_package(SDK_PACKAGE, "JIDO_A2A_JS_SDK", tmp_path_factory, "A2A JS SDK")


async def _drive(
    a2a_js: tuple[str, Path], url: str, token: str, text: str, message_id: str
) -> dict[str, Any]:
    """The driver's steps against the agent at ``url``, by step name."""
    node, modules = a2a_js
    spec = {"url": url, "token": token, "text": text, "messageId": message_id}
    proc = await asyncio.create_subprocess_exec(
        node,
        str(DRIVER),
        str(modules),
        json.dumps(spec),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    async with asyncio.timeout(300):
        out, err = await proc.communicate()
    assert proc.returncode == 0, f"the JS driver failed ({proc.returncode}): {err.decode()[-4000:]}"
    steps = [json.loads(line) for line in out.decode().splitlines() if line.startswith("{")]
    return {s["step"]: s for s in steps}


@pytest.mark.parametrize("suffix", ["/", "/a2a", "/a2a/"])
async def test_the_js_client_discovers_sends_gets_and_lists(
    a2a_system: A2ASystem, a2a_js: tuple[str, Path], suffix: str
) -> None:
    mine = f"js-{new_id()}"
    steps = await _drive(a2a_js, a2a_system.agent_url + suffix, a2a_system.token, "hello from js", mine)
    sent, got, listed = steps["send"], steps["get"], steps["list"]
    assert sent["ok"] and sent["state"] == COMPLETED, sent
    assert sent["artifacts"] == ["You said: hello from js"]
    assert got["ok"] and got["id"] == sent["id"], got
    assert [(m["messageId"], m["text"]) for m in got["history"][:1]] == [(mine, ["hello from js"])]
    assert got["history"][1]["text"] == ["You said: hello from js"]
    assert listed["ok"] and listed["listed"] and listed["totalSize"] >= 1, listed


async def test_a_failed_call_reaches_the_js_client_as_its_error(
    a2a_system: A2ASystem, a2a_js: tuple[str, Path]
) -> None:
    steps = await _drive(a2a_js, a2a_system.agent_url + "/", a2a_system.token, "then fail", f"js-{new_id()}")
    unknown = steps["get-unknown"]
    assert (unknown["ok"], unknown["error"]) == (False, "JsonRpcTaskNotFoundError"), unknown
    assert "not found" in unknown["message"].lower()
