"""End to end: every service on a real nats-server, real litellm against the scripted LLM, the client SDK.

The conversation service runs with ``make_llm_port(config, bus=…)`` so the
system prompt, the llm.* signals and the ledger are live.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from jidocode.cli.dev.scripted_llm import Reply, ScriptedLlm, call
from jidocode.client import ApprovalRequest, JidoClient, TurnFailed
from jidocode.services.conversation.llm import make_llm_port
from jidocode.services.registry import SERVICES, serve_many
from jidocode.shared import subjects
from jidocode.shared.bus import Bus
from jidocode.shared.config import Config
from jidocode.shared.envelope import Envelope
from tests.helpers import wait_for_services

pytestmark = pytest.mark.slow

FAST = {"retry_backoff_s": 0.01, "retry_backoff_max_s": 0.05}


def _available(name: str) -> bool:
    return importlib.util.find_spec(f"jidocode.services.{name}.service") is not None


@dataclass
class System:
    config: Config
    llm: ScriptedLlm
    bus: Bus
    project: Path
    signals: list[Envelope]

    async def client(self, **kw: Any) -> JidoClient:
        return await JidoClient.connect(project_dir=self.project, bus=self.bus, settings={**FAST, **kw})

    async def wait_signal(self, type_: str, timeout: float = 20.0) -> Envelope:
        async def _wait() -> Envelope:
            while True:
                for env in self.signals:
                    if env.type == type_:
                        return env
                await asyncio.sleep(0)  # yield to the subscription callbacks; the loop is bounded by wait_for
                await self.bus.nc.flush()

        return await asyncio.wait_for(_wait(), timeout)


@pytest.fixture
async def llm_server() -> AsyncIterator[ScriptedLlm]:
    async with ScriptedLlm() as server:
        yield server


@pytest.fixture
async def system(
    config: Config, llm_server: ScriptedLlm, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[System]:
    scripted_llm = llm_server
    monkeypatch.setenv("JIDO_LLM_MODEL", "openai/scripted")
    monkeypatch.setenv("JIDO_LLM_API_BASE", scripted_llm.api_base)
    project = tmp_path / "proj"
    (project / ".jido").mkdir(parents=True)
    (project / ".jido" / "settings.json").write_text(
        json.dumps(
            {
                "permissions": {
                    "allow": ["Read", "Edit(src/**)", "Bash(sleep:*)", "Bash(echo:*)"],
                    "ask": ["Edit(ask/**)"],
                    "deny": ["Bash(rm:*)"],
                },
                "tools": {"approval_timeout_s": 30},
            }
        )
    )
    (project / ".jido" / "JIDO.md").write_text("Always answer in English.")
    (project / "README.md").write_text("hello from the readme\n")
    (project / "src").mkdir()
    (project / "src" / "a.py").write_text("print('a')\n")
    (project / "src" / "b.py").write_text("print('b')\n")
    (project / "ask").mkdir()
    (project / "ask" / "x.txt").write_text("before\n")

    others = tuple(n for n in SERVICES if n != "conversation" and _available(n))
    stop = asyncio.Event()
    llm_bus = await Bus.connect(config, "conversation-llm")
    from jidocode.services.conversation.service import serve as serve_conversation

    tasks = [
        asyncio.create_task(serve_many(config, stop, others)),
        asyncio.create_task(serve_conversation(config, stop, llm=make_llm_port(config, bus=llm_bus))),
    ]
    bus = await Bus.connect(config, "e2e")
    signals: list[Envelope] = []

    async def on_signal(env: Envelope) -> None:
        signals.append(env)

    await bus.subscribe(subjects.signal_filter(), on_signal)
    try:
        await wait_for_services(config, (*others, "conversation"), timeout=30)
        yield System(config=config, llm=scripted_llm, bus=bus, project=project, signals=signals)
    finally:
        stop.set()
        await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), 30)
        await bus.close()
        await llm_bus.close()


def _tool_messages(body: dict[str, Any]) -> list[dict[str, Any]]:
    return [m for m in body["messages"] if m.get("role") == "tool"]


async def test_question_that_needs_read_file(system: System) -> None:
    system.llm.script(
        Reply.tools(call("read_file", path="README.md")),
        Reply.answer("The readme says hello.", chunk_chars=5),
    )
    client = await system.client()
    deltas: list[str] = []
    answer = await client.send_message("What does the readme say?", on_delta=deltas.append, timeout=60)
    assert answer == "The readme says hello."
    assert "".join(deltas).endswith("The readme says hello.")
    first, second = await system.llm.wait_requests(2)
    system_prompt = first["messages"][0]
    assert system_prompt["role"] == "system"
    assert str(system.project.resolve()) in system_prompt["content"]
    assert "Always answer in English." in system_prompt["content"]
    assert {t["function"]["name"] for t in first.get("tools", [])} >= {"read_file"}
    (tool,) = _tool_messages(second)
    assert "hello from the readme" in tool["content"]
    history = await client.get_history()
    assert history[0] == {"role": "user", "content": "What does the readme say?"}
    assert history[-1]["content"] == "The readme says hello."
    usage = await client.get_context_usage()
    assert usage.calls == 2
    assert usage.total_tokens > 0
    assert usage.context_window > 0
    assert 0 < usage.percent_used < 100


async def test_multi_tool_turn_runs_every_call(system: System) -> None:
    system.llm.script(
        Reply.tools(
            call("read_file", path="src/a.py"),
            call("read_file", path="src/b.py"),
            call("list_dir", path="src"),
        ),
        Reply.answer("Two files."),
    )
    client = await system.client()
    assert await client.send_message("What is in src?", timeout=60) == "Two files."
    _, second = await system.llm.wait_requests(2)
    tools = _tool_messages(second)
    assert len(tools) == 3
    assert "print('a')" in tools[0]["content"]
    assert "print('b')" in tools[1]["content"]
    assert "a.py" in tools[2]["content"] and "b.py" in tools[2]["content"]


async def test_an_edit_lands_on_disk(system: System) -> None:
    system.llm.script(
        Reply.tools(call("edit_file", path="src/a.py", old_string="print('a')", new_string="print('A')")),
        Reply.answer("Edited."),
    )
    client = await system.client()
    assert await client.send_message("Make a.py shout", timeout=60) == "Edited."
    assert (system.project / "src" / "a.py").read_text() == "print('A')\n"


@pytest.mark.parametrize(("decision", "expected"), [("approve_once", "after\n"), ("deny", "before\n")])
async def test_ask_rule_goes_to_the_approve_callback(system: System, decision: str, expected: str) -> None:
    system.llm.script(
        Reply.tools(call("write_file", path="ask/x.txt", content="after\n")),
        Reply.answer("Done asking."),
    )
    asked: list[ApprovalRequest] = []

    async def approve(request: ApprovalRequest) -> str:
        asked.append(request)
        return decision

    client = await system.client()
    await client.configure_tools(approve=approve)
    assert await client.send_message("Write x", timeout=60) == "Done asking."
    assert [a.tool for a in asked] == ["write_file"]
    assert asked[0].args["path"] == "ask/x.txt"
    assert (system.project / "ask" / "x.txt").read_text() == expected
    _, second = await system.llm.wait_requests(2)
    (tool,) = _tool_messages(second)
    if decision == "deny":
        assert "error" in tool["content"]


async def test_cancel_in_the_middle_of_a_long_bash(system: System) -> None:
    system.llm.script(Reply.tools(call("bash", command="sleep 60")))
    client = await system.client()
    turn = asyncio.create_task(client.send_message("Wait a minute", timeout=60))
    await system.wait_signal("tool.started")
    await client.cancel("user pressed Ctrl-C")
    with pytest.raises(TurnFailed) as info:
        await turn
    assert info.value.type == "cancelled"
    failed = await system.wait_signal("tool.failed")
    assert failed.data["error"]["type"] == "cancelled"
    # the conversation goes on after resume
    await client.resume()
    system.llm.script(Reply.answer("back"))
    assert await client.send_message("still there?", timeout=60) == "back"


async def test_rate_limit_is_retried_and_shown(system: System) -> None:
    system.llm.script(Reply.error(429, retry_after=0), Reply.answer("after the wait"))
    client = await system.client()
    assert await client.send_message("hi", timeout=60) == "after the wait"
    retry = await system.wait_signal("llm.retrying")
    assert retry.data["error_type"] == "llm_rate_limited"
    assert retry.conversation_id == client.conversation_id
    assert len(system.llm.requests) == 2


async def test_bad_key_is_a_clear_failed_turn(system: System) -> None:
    system.llm.script(Reply.error(401))
    client = await system.client()
    with pytest.raises(TurnFailed) as info:
        await client.send_message("hi", timeout=60)
    assert info.value.type == "llm_auth"


async def test_reset_session_starts_empty(system: System) -> None:
    system.llm.script(Reply.answer("one"), Reply.answer("two"))
    client = await system.client()
    assert await client.send_message("first", timeout=60) == "one"
    old = client.conversation_id
    await client.reset_session()
    assert client.conversation_id != old
    assert await client.get_history() == []
    assert await client.send_message("second", timeout=60) == "two"
    last = system.llm.requests[-1]["messages"]
    assert [m["content"] for m in last if m["role"] == "user"] == ["second"]


async def _jidocode(system: System, *args: str, stdin: bytes = b"") -> tuple[int, str, str]:
    env = {**os.environ, "NATS_URL": system.config.nats_url, "COLUMNS": "200"}
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "jidocode.cli.main",
        *args,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=env,
    )
    out, err = await asyncio.wait_for(proc.communicate(stdin), 90)
    return proc.returncode or 0, out.decode(), err.decode()


async def test_cli_one_shot_streams_answer_and_tool_lines(system: System) -> None:
    system.llm.script(
        Reply.tools(call("read_file", path="README.md")),
        Reply.answer("The readme says hello.", chunk_chars=4),
    )
    code, out, err = await _jidocode(system, "chat", str(system.project), "What does the readme say?")
    assert code == 0, err
    assert "read_file" in out and "path=README.md" in out
    assert "✓" in out
    assert out.rstrip().endswith("The readme says hello.")


async def test_cli_chooses_model_and_api_base(system: System, monkeypatch: pytest.MonkeyPatch) -> None:
    # --api-base/--api-key-env replace the settings' base: the answer comes from the other server,
    # with the key from the variable the client named (read by the conversation service), which
    # the user's settings list in llm.client_key_envs.
    monkeypatch.setenv("JIDO_E2E_CHAT_KEY", "sk-chosen")
    (system.config.jido_home / "settings.json").write_text(
        json.dumps({"llm": {"client_key_envs": ["JIDO_E2E_CHAT_KEY"]}})
    )
    async with ScriptedLlm(api_key="sk-chosen") as other:
        other.script(Reply.answer("from the chosen base"))
        code, out, err = await _jidocode(
            system,
            "chat",
            str(system.project),
            "--model",
            "openai/scripted",
            "--api-base",
            other.api_base,
            "--api-key-env",
            "JIDO_E2E_CHAT_KEY",
            "hello",
        )
        assert code == 0, err
        assert out.rstrip().endswith("from the chosen base")
        assert len(other.requests) == 1
        assert other.headers[-1]["authorization"] == "Bearer sk-chosen"
    assert system.llm.requests == []


async def test_a_client_cannot_send_an_unlisted_variable_as_the_key(
    system: System, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The conversation service's environment holds its NATS password and provider keys: a client
    # naming one with its own --api-base would have it sent there. Refused, nothing sent.
    monkeypatch.setenv("JIDO_E2E_SECRET", "canary-secret-value")
    async with ScriptedLlm() as attacker:
        attacker.script(Reply.answer("got it"))
        code, out, err = await _jidocode(
            system,
            "chat",
            str(system.project),
            "--api-base",
            attacker.api_base,
            "--api-key-env",
            "JIDO_E2E_SECRET",
            "hello",
        )
        assert code != 0
        assert "llm.client_key_envs" in out + err and "JIDO_E2E_SECRET" in out + err
        assert "canary-secret-value" not in out + err
        assert attacker.requests == [] and attacker.headers == []
    # --api-base alone is allowed and sends no secret
    async with ScriptedLlm() as local:
        local.script(Reply.answer("local answer"))
        code, out, err = await _jidocode(
            system, "chat", str(system.project), "--api-base", local.api_base, "hi"
        )
        assert code == 0, err
        assert out.rstrip().endswith("local answer")
        assert "canary-secret-value" not in json.dumps(local.headers)


async def test_cli_json_prints_the_event_stream(system: System) -> None:
    system.llm.script(Reply.answer("json answer"))
    code, out, err = await _jidocode(system, "chat", str(system.project), "--json", stdin=b"hi there")
    assert code == 0, err
    lines = [json.loads(line) for line in out.splitlines() if line.strip()]
    types = [line["type"] for line in lines]
    assert "conversation.user.message" in types
    assert "conversation.assistant.delta" in types
    assert lines[-1] == {"type": "chat.answer", "text": "json answer"}


async def test_cli_denies_asks_without_a_terminal_and_reports_errors(system: System) -> None:
    system.llm.script(
        Reply.tools(call("write_file", path="ask/x.txt", content="after\n")),
        Reply.answer("ok"),
    )
    code, _, err = await _jidocode(system, "chat", str(system.project), "write it")
    assert code == 0, err
    assert "denied write_file" in err
    assert (system.project / "ask" / "x.txt").read_text() == "before\n"
    system.llm.script(Reply.error(401))
    code, _, err = await _jidocode(system, "chat", str(system.project), "again")
    assert code == 1
    assert "llm_auth" in err


async def test_default_wiring_of_the_services_fixture(
    services: Config, llm_server: ScriptedLlm, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The services as the shared fixture runs them (the conversation service's own LLM port)."""
    monkeypatch.setenv("JIDO_LLM_MODEL", "openai/scripted")
    monkeypatch.setenv("JIDO_LLM_API_BASE", llm_server.api_base)
    project = tmp_path / "plain"
    project.mkdir()
    llm_server.script(Reply.answer("plain answer", prompt_tokens=100, completion_tokens=20))
    bus = await Bus.connect(services, "e2e-default")
    try:
        client = await JidoClient.connect(project_dir=project, bus=bus)
        assert await client.send_message("hello", timeout=60) == "plain answer"
        usage = await client.get_context_usage()
        assert (usage.calls, usage.tokens_used) == (1, 120)
        assert usage.context_window > 0 and usage.percent_used > 0
        await client.close()
    finally:
        await bus.close()


async def test_configure_tools_chooses_what_the_model_sees(system: System) -> None:
    system.llm.script(Reply.answer("one"), Reply.answer("two"))
    client = await system.client()
    await client.configure_tools(unexpose=["bash", "write_file"])
    assert await client.send_message("first", timeout=60) == "one"
    names = {t["function"]["name"] for t in system.llm.requests[0]["tools"]}
    assert "read_file" in names and "bash" not in names and "write_file" not in names
    await client.configure_tools(expose=["read_file", "list_dir"], unexpose=[])
    # the conversation service's actor keeps the settings it started with: a new session sees the change
    await client.reset_session()
    assert await client.send_message("second", timeout=60) == "two"
    assert {t["function"]["name"] for t in system.llm.requests[1]["tools"]} == {"read_file", "list_dir"}
