"""Slash commands end to end (seed 000 "command descriptors usable by dispatch"), and reload_assets.

Every service on a real nats-server and the scripted LLM (the ``system`` fixture of
``test_chat``): a project command is rendered by the asset loader and its prompt is the
user's message the model gets, through the SDK and through ``jidocode chat``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from jidocode.cli.dev.scripted_llm import Reply
from jidocode.shared.clients import ProjectClient
from jidocode.shared.errors import InvalidInput, NotFound
from tests.e2e.test_chat import System, _jidocode

pytestmark = pytest.mark.slow

REVIEW = """---
description: Review one file
arguments:
  - {name: path, required: true}
---
Review {{path}} carefully. Everything asked: $ARGUMENTS
"""


def _command(project: Path, name: str, body: str) -> None:
    folder = project / ".jido" / "commands"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{name}.md").write_text(body)


def _user_messages(request: dict[str, object]) -> list[object]:
    messages = request["messages"]
    assert isinstance(messages, list)
    return [m["content"] for m in messages if m["role"] == "user"]


async def test_the_sdk_renders_a_command_and_sends_it_as_the_users_message(system: System) -> None:
    _command(system.project, "review", REVIEW)
    system.llm.script(Reply.answer("Looks fine."))
    client = await system.client()
    rendered = await client.render_command("review", "src/a.py security")
    assert rendered.prompt.startswith("Review src/a.py carefully. Everything asked: src/a.py security")
    assert await client.run_command("review", "src/a.py security", timeout=60) == "Looks fine."
    [request] = await system.llm.wait_requests(1)
    assert _user_messages(request) == [rendered.prompt]
    assert (await client.get_history())[0] == {"role": "user", "content": rendered.prompt}

    # an unknown command or a missing required argument: a clear error, nothing is sent
    with pytest.raises(NotFound) as unknown:
        await client.run_command("nope", timeout=60)
    assert unknown.value.details["available"] == ["review"]
    assert "/nope" in unknown.value.message and "/review" in unknown.value.message
    with pytest.raises(InvalidInput, match="path"):
        await client.run_command("review", timeout=60)
    with pytest.raises(InvalidInput, match="not a command name"):
        await client.run_command("Bad Name", timeout=60)
    assert len(system.llm.requests) == 1


async def test_reload_assets_serves_a_new_command_and_reports_what_settings_ignore(system: System) -> None:
    client = await system.client()
    assert await client.list_commands() == []
    _command(system.project, "late", "Say $1 twice.\n")
    settings = system.project / ".jido" / "settings.json"
    value = json.loads(settings.read_text())
    value["signal_bus"] = {
        "middleware": [{"module": "JidoSignal.Bus.Middleware.Logger", "opts": {"level": "debug"}}]
    }
    settings.write_text(json.dumps(value))

    report = await client.reload_assets()
    assert report.counts["command"] == 1
    [diag] = [d for d in report.diagnostics if d.get("key") == "signal_bus.middleware[0]"]
    assert diag["severity"] == "warning" and diag["file"] == str(settings)
    assert "not supported" in diag["problem"] and "jidocode watch" in diag["problem"]
    # the project-level verb (seed 000 Project.Server :reload_assets) answers the same way
    again = await ProjectClient(system.bus, client.project_id, timeout=30).reload_assets()
    assert again.generation > report.generation and again.counts == report.counts

    system.llm.script(Reply.answer("hi hi"))
    assert await client.run_command("late", "hi", timeout=60) == "hi hi"
    [request] = await system.llm.wait_requests(1)
    assert _user_messages(request) == ["Say hi twice.\n"]


async def test_chat_runs_a_command_and_lists_the_commands_for_an_unknown_one(system: System) -> None:
    _command(system.project, "review", REVIEW)
    system.llm.script(Reply.answer("Reviewed."), Reply.answer("Reviewed again."))
    code, out, err = await _jidocode(system, "chat", str(system.project), "/review src/b.py")
    assert code == 0, err
    assert "» /review src/b.py" in out and "project command" in out
    assert out.rstrip().endswith("Reviewed.")
    [request] = await system.llm.wait_requests(1)
    assert _user_messages(request) == ["Review src/b.py carefully. Everything asked: src/b.py\n"]

    code, out, err = await _jidocode(system, "chat", str(system.project), "--json", stdin=b"/review src/a.py")
    assert code == 0, err
    lines = [json.loads(line) for line in out.splitlines() if line.strip()]
    [command] = [line for line in lines if line["type"] == "chat.command"]
    assert (command["command"], command["arguments"]) == ("review", "src/a.py")
    assert lines[-1] == {"type": "chat.answer", "text": "Reviewed again."}

    code, out, err = await _jidocode(system, "chat", str(system.project), "/nope please")
    assert code == 1
    assert "unknown command /nope" in err and "/review" in err and "/usage" in err
    assert len(system.llm.requests) == 2  # nothing sent for the unknown one
