"""The console's rewind of the files (issue 30 point 2, docs/rewind.md): the routes behind its
**Rewind to here** panel, ``GET …/rewind/preview`` (the diff, nothing done) and ``POST
…/rewind/restore`` (the confirmation), against every service on a real nats-server, real
litellm on the scripted model and a turn that writes files in the sandbox."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from jidocode.cli.dev.scripted_llm import Reply, call
from tests.integration.gateway.conftest import Gateway
from tests.sse_reader import SseMessage

pytestmark = [pytest.mark.slow, pytest.mark.asyncio(loop_scope="module")]


def _project(root: Path) -> Path:
    """A project (trusted: beside the fixture's) whose settings let the agent edit ``src``."""
    (root / ".jido").mkdir(parents=True)
    (root / ".jido" / "settings.json").write_text(
        json.dumps({"permissions": {"allow": ["Read", "Edit(src/**)"]}})
    )
    (root / "src").mkdir()
    (root / "src" / "a.py").write_text("print('a')\n")
    (root / "src" / "b.py").write_text("print('b')\n")
    return root


async def _turn(gateway: Gateway, http: httpx.AsyncClient, base: str, text: str) -> str:
    """Send ``text``; once its answer streamed, the user message's id."""
    accepted = (await http.post(f"{base}/messages", json={"text": text})).json()

    def answered(message: SseMessage) -> bool:
        event = message.json()
        return (
            message.event == "conversation.assistant.message"
            and event.get("correlationid") == accepted["correlation_id"]
        )

    await gateway.collect(http, f"{base}/events", answered)
    return str(accepted["id"])


async def test_the_console_restores_files_after_the_diff_and_keeps_the_users(gateway: Gateway) -> None:
    root = _project(gateway.project.parent / "rewound")
    src = root / "src"
    gateway.llm.script(
        Reply.tools(
            call("write_file", path="src/a.py", content="print('agent')\n"),
            call("write_file", path="src/c.py", content="made by the agent\n"),
        ),
        Reply.answer("changed"),
    )
    async with gateway.client() as http:
        pid = (await http.post("/api/projects", json={"root": str(root)})).json()["project_id"]
        cid = (await http.post(f"/api/projects/{pid}/conversations", json={})).json()["conversation_id"]
        base = f"/api/projects/{pid}/conversations/{cid}"
        message = await _turn(gateway, http, base, "change the files")

        missing = await http.get(f"{base}/rewind/preview")
        assert missing.status_code == 400 and "message_id is required" in missing.json()["error"]["message"]
        preview = await http.get(f"{base}/rewind/preview", params={"message_id": message})
        assert preview.status_code == 200, preview.text
        shown = preview.json()
        assert shown["done"] is False and shown["files"] is None and shown["conversation"] is None
        assert (shown["diff"]["modified"], shown["diff"]["deleted"]) == (["src/a.py"], ["src/c.py"])
        assert (src / "a.py").read_text() == "print('agent')\n" and (src / "c.py").exists()

        (src / "b.py").write_text("print('user')\n")  # the user's own change, after the turn
        again = (await http.get(f"{base}/rewind/preview", params={"message_id": message})).json()
        assert again["diff"]["changed_by_user"] == ["src/b.py"]

        restored = await http.post(f"{base}/rewind/restore", json={"message_id": message, "what": "both"})
        assert restored.status_code == 200, restored.text
        outcome = restored.json()
        assert outcome["done"] is True and outcome["files"]["kept"] == ["src/b.py"]
        assert outcome["conversation"]["message_id"] == message
        context = (await http.get(f"{base}/projections/llm_context")).json()["value"]
        assert context == []
    assert (src / "a.py").read_text() == "print('a')\n" and not (src / "c.py").exists()
    assert (src / "b.py").read_text() == "print('user')\n"
