"""First contact (issue 25 points 2, 5 and 7): the README's first `jidocode chat` in a project
with no settings, through the real CLI against every service on a real nats-server and a
scripted model.

- the assistant reads the project (trusted or not); in a trusted project an edit or a command
  asks, and with nobody to answer the denial names the rule to add;
- on a terminal (a pseudo-terminal here) chat asks once whether to trust the folder: no goes on
  untrusted, yes writes the trust store; ``/help`` lists the built-in and the project's commands;
  the answer's markdown is rendered;
- ``chat -c`` continues the project's latest conversation.

The user's home is fresh (``HOME``) and the global layer empty: no settings anywhere.
"""

from __future__ import annotations

import asyncio
import fcntl
import json
import os
import re
import select
import struct
import subprocess
import sys
import termios
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from jidocode.cli.dev.scripted_llm import Reply, ScriptedLlm, call
from jidocode.services.registry import serve_many
from jidocode.shared.bus import Bus
from jidocode.shared.clients import EngineClient, ToolsClient
from jidocode.shared.config import Config
from jidocode.shared.envelope import new_id
from jidocode.shared.events.tools import ToolCallMeta, ToolResult
from jidocode.shared.trust import trust_state, trusted_projects, untrust_project
from tests.helpers import wait_for_services

pytestmark = pytest.mark.slow

README = "hello from the readme: this project greets people\n"
CANARY = f"CANARY-{new_id()}"
#: A CSI or OSC escape sequence (what a terminal interprets), for reading what the user saw.
_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[()][0-9A-Za-z]")


@dataclass
class World:
    config: Config
    bus: Bus
    home: Path
    user_home: Path
    root: Path
    outside: Path
    llm: ScriptedLlm

    def env(self) -> dict[str, str]:
        return {
            **os.environ,
            "NATS_URL": self.config.nats_url,
            "JIDO_CODE_HOME": str(self.home),
            "HOME": str(self.user_home),
            "COLUMNS": "200",
            "TERM": "xterm-256color",
        }

    def argv(self, *args: str) -> list[str]:
        return [sys.executable, "-m", "jidocode.cli.main", *args]

    async def run(self, *args: str) -> tuple[int, str, str]:
        proc = await asyncio.create_subprocess_exec(
            *self.argv(*args),
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=self.env(),
        )
        out, err = await asyncio.wait_for(proc.communicate(), 120)
        assert proc.returncode is not None
        return proc.returncode, out.decode(), " ".join(err.decode().split())

    async def tool(self, name: str, args: dict[str, Any]) -> ToolResult:
        project_id = (await EngineClient(self.bus).start_project(str(self.root), timeout=30)).project_id
        meta = ToolCallMeta(request_id=new_id())
        return await ToolsClient(self.bus, project_id).run(name, args, meta=meta, timeout=60)


@pytest.fixture
async def world(
    config: Config, jido_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[World]:
    for var in ("OPENAI_API_KEY", "OPENAI_API_BASE", "OPENAI_BASE_URL"):
        monkeypatch.delenv(var, raising=False)
    user_home = tmp_path / "home"
    user_home.mkdir()
    root, outside = tmp_path / "my project", tmp_path / "outside"
    root.mkdir()
    outside.mkdir()
    (root / "README.md").write_text(README)
    (outside / "secret.txt").write_text(f"{CANARY}\n")
    async with ScriptedLlm() as llm:
        # the model is the user's (the environment); no settings.json anywhere
        monkeypatch.setenv("JIDO_LLM_MODEL", "openai/scripted")
        monkeypatch.setenv("JIDO_LLM_API_BASE", llm.api_base)
        stop = asyncio.Event()
        task = asyncio.create_task(serve_many(config, stop))
        bus = await Bus.connect(config, "first-chat-test")
        try:
            await wait_for_services(config, timeout=30)
            yield World(config, bus, jido_home, user_home, root, outside, llm)
        finally:
            stop.set()
            await asyncio.wait_for(asyncio.gather(task, return_exceptions=True), 30)
            await bus.close()


def _tool_messages(body: dict[str, Any]) -> list[str]:
    return [str(m.get("content")) for m in body["messages"] if m.get("role") == "tool"]


def _offered(body: dict[str, Any]) -> set[str]:
    return {t["function"]["name"] for t in body.get("tools") or []}


# --- the defaults ---------------------------------------------------------------------------


@pytest.mark.parametrize("trusted", [True, False], ids=["trusted", "untrusted"])
async def test_the_readme_first_chat_reads_the_project(world: World, tmp_path: Path, trusted: bool) -> None:
    if not trusted:
        untrust_project(tmp_path, home=world.home)  # the shared fixture trusts tmp_path
    assert trust_state(world.root, home=world.home).trusted is trusted
    world.llm.script(
        Reply.tools(call("read_file", path="README.md")),
        Reply.answer("It greets people."),
    )
    code, out, err = await world.run("chat", str(world.root), "what does this project do?")
    assert code == 0, err
    assert out.strip().endswith("It greets people.")
    first, second = await world.llm.wait_requests(2)
    assert {"read_file", "list_dir", "glob", "grep"} <= _offered(first)
    assert ({"bash", "edit_file", "write_file"} <= _offered(first)) is trusted  # untrusted: reads only
    system_prompt = str(first["messages"][0]["content"])  # the policy the model is told is the real one
    assert "- Allowed: Read" in system_prompt
    assert f"- Anything not listed: {'asks the user' if trusted else 'denied'}." in system_prompt
    [result] = _tool_messages(second)
    assert "hello from the readme" in result and "unknown_tool" not in result


async def test_a_trusted_ask_nobody_can_answer_names_the_rule(world: World) -> None:
    world.llm.script(
        Reply.tools(call("bash", command="npm test")),
        Reply.answer("The tests could not run."),
    )
    code, out, err = await world.run("chat", str(world.root), "run the tests")
    assert code == 0, err
    assert "denied bash(command=npm test) (nobody can answer: stdin is not a terminal)" in err
    assert 'add "Bash(npm test:*)" to permissions.allow in .jido/settings.json' in err
    _, second = await world.llm.wait_requests(2)
    [result] = _tool_messages(second)
    assert "permission_denied" in result

    # no conversation to ask at all (`jidocode tools run`): the same rule is named
    code, out, _ = await world.run(
        "tools", "run", str(world.root), "bash", "--args", '{"command": "npm test"}'
    )
    assert code == 1
    error = json.loads(out)["error"]
    assert error["type"] == "permission_denied"
    assert 'add "Bash(npm test:*)" to permissions.allow in .jido/settings.json' in error["message"]


async def test_untrusted_reads_never_leave_the_root(world: World, tmp_path: Path) -> None:
    untrust_project(tmp_path, home=world.home)
    (world.root / "link.txt").symlink_to(world.outside / "secret.txt")
    (world.root / "elsewhere").symlink_to(world.outside)
    (world.root / ".env").write_text(f"TOKEN={CANARY}\n")
    inside = await world.tool("read_file", {"path": "README.md"})
    assert inside.ok and inside.data["content"] == README  # the control: reads inside work
    for name, args in (
        ("read_file", {"path": "../outside/secret.txt"}),
        ("read_file", {"path": str(world.outside / "secret.txt")}),
        ("read_file", {"path": "link.txt"}),
        ("read_file", {"path": "elsewhere/secret.txt"}),
        ("read_file", {"path": ".env"}),
        ("list_dir", {"path": "elsewhere"}),
        ("list_dir", {"path": ".."}),
        ("glob", {"pattern": "**/*.txt", "path": "elsewhere"}),
        ("grep", {"pattern": "CANARY", "path": ".."}),
        ("grep", {"pattern": "CANARY", "path": "elsewhere"}),
        ("bash", {"command": "cat ../outside/secret.txt"}),
    ):
        result = await world.tool(name, args)
        assert not result.ok, (name, args)
        assert CANARY not in json.dumps(result.model_dump(mode="json")), (name, args)
    # a whole-tree read from the root does not follow the links out either
    for name, args in (
        ("grep", {"pattern": "CANARY", "path": "."}),
        ("glob", {"pattern": "**/*", "path": "."}),
        ("list_dir", {"path": "."}),
    ):
        result = await world.tool(name, args)
        assert CANARY not in json.dumps(result.model_dump(mode="json")), (name, args)
        assert "secret.txt" not in json.dumps(result.data), (name, args)


# --- the terminal ---------------------------------------------------------------------------


class Terminal:
    """``jidocode chat`` on a pseudo-terminal: what it printed so far, what the user types."""

    def __init__(self, argv: list[str], env: dict[str, str]) -> None:
        master, slave = os.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 50, 200, 0, 0))
        self.proc = subprocess.Popen(
            argv, stdin=slave, stdout=slave, stderr=slave, env=env, start_new_session=True, close_fds=True
        )
        os.close(slave)
        self.master = master
        self.raw = b""

    @property
    def screen(self) -> str:
        """Everything shown so far, without escape sequences and carriage returns."""
        return _ANSI.sub("", self.raw.decode(errors="replace")).replace("\r", "")

    def _expect(self, text: str, start: int, timeout: float) -> int:
        end = time.monotonic() + timeout
        while True:
            found = self.screen.find(text, start)
            if found >= 0:
                return found + len(text)
            left = end - time.monotonic()
            if left <= 0 or (self.proc.poll() is not None and not select.select([self.master], [], [], 0)[0]):
                raise AssertionError(f"{text!r} not shown within {timeout} s; the screen:\n{self.screen}")
            ready, _, _ = select.select([self.master], [], [], min(left, 1.0))
            if ready:
                try:
                    self.raw += os.read(self.master, 65536)
                except OSError:  # the child closed the terminal
                    if self.proc.poll() is None:
                        self.proc.wait(timeout=left)

    async def expect(self, text: str, *, after: int = 0, timeout: float = 90.0) -> int:
        """Wait until ``text`` is on the screen (at or after ``after``); where it ends."""
        return await asyncio.to_thread(self._expect, text, after, timeout)

    def type(self, line: str) -> None:
        os.write(self.master, line.encode() + b"\r")

    async def close(self) -> int:
        code = await asyncio.to_thread(self.proc.wait, 60)
        await asyncio.to_thread(self._drain)
        os.close(self.master)
        return code

    def _drain(self) -> None:
        while select.select([self.master], [], [], 0)[0]:
            try:
                chunk = os.read(self.master, 65536)
            except OSError:
                return
            if not chunk:
                return
            self.raw += chunk


@pytest.mark.timeout(400)
async def test_on_a_terminal_chat_asks_once_to_trust_then_helps_and_renders(
    world: World, tmp_path: Path
) -> None:
    untrust_project(tmp_path, home=world.home)
    commands = world.root / ".jido" / "commands"
    commands.mkdir(parents=True)
    (commands / "review.md").write_text(
        "---\ndescription: Review the staged changes\n---\nReview $ARGUMENTS\n"
    )
    world.llm.script(Reply.answer("# Plan\n\nSome **bold** words.\n\n- one\n- two\n", chunk_chars=4))

    # no: the conversation goes on untrusted, nothing is written
    term = Terminal(world.argv("chat", str(world.root)), world.env())
    at = await term.expect("Do you trust the files in this folder?")
    at = await term.expect(str(world.root.resolve()), after=at)
    at = await term.expect("lets the assistant ask to edit files and run commands here", after=at)
    at = await term.expect("Trust this folder? [y/N]:", after=at)
    term.type("n")
    at = await term.expect("continuing untrusted", after=at)
    at = await term.expect("conversation ", after=at)
    at = await term.expect("> ", after=at)
    term.type("/help")
    at = await term.expect("built-in commands", after=at)
    at = await term.expect("/compact [what to keep]", after=at)
    at = await term.expect("/review", after=at)
    at = await term.expect("Review the staged changes", after=at)
    at = await term.expect("> ", after=at)
    term.type("what is the plan?")
    at = await term.expect("Plan", after=at)
    end = await term.expect("two", after=at)
    shown = term.screen[at:end]
    assert "Some bold words." in shown and "**" not in shown and "# Plan" not in term.screen
    term.type("/quit")
    assert await term.close() == 0
    assert trusted_projects(home=world.home) == []
    conversation = re.search(r"conversation ([0-9a-z]+)", term.screen)
    assert conversation is not None

    # yes: the trust store says so, as `jidocode projects trust` would
    term = Terminal(world.argv("chat", str(world.root)), world.env())
    at = await term.expect("Trust this folder? [y/N]:")
    term.type("y")
    at = await term.expect("trusted", after=at)
    await term.expect("> ", after=at)
    term.type("/quit")
    assert await term.close() == 0
    assert [e.root for e in trusted_projects(home=world.home)] == [str(world.root.resolve())]

    # asked once: a trusted folder is not asked again
    term = Terminal(world.argv("chat", str(world.root)), world.env())
    at = await term.expect("> ")
    term.type("/quit")
    assert await term.close() == 0
    assert "Trust this folder?" not in term.screen


async def test_without_a_terminal_chat_prints_the_exact_trust_command(world: World, tmp_path: Path) -> None:
    untrust_project(tmp_path, home=world.home)
    world.llm.script(Reply.answer("fine"))
    code, _out, err = await world.run("chat", str(world.root), "hi")
    assert code == 0, err
    assert f"run `jidocode projects trust '{world.root.resolve()}'`" in err  # quoted: the path has a space
    assert trusted_projects(home=world.home) == []


async def test_chat_continue_reopens_the_latest_conversation(world: World) -> None:
    world.llm.script(Reply.answer("noted"), Reply.answer("you said the sky is green"), Reply.answer("new"))
    code, _, err = await world.run("chat", str(world.root), "remember: the sky is green")
    assert code == 0, err
    code, out, err = await world.run("chat", str(world.root), "-c", "what did I say?")
    assert code == 0, err
    assert out.strip().endswith("you said the sky is green")
    _first, second = await world.llm.wait_requests(2)
    said = [m.get("content") for m in second["messages"] if m.get("role") == "user"]
    assert said[-2:] == ["remember: the sky is green", "what did I say?"]
    # without -c a chat starts afresh
    code, _, err = await world.run("chat", str(world.root), "hello")
    assert code == 0, err
    third = (await world.llm.wait_requests(3))[2]
    assert [m.get("content") for m in third["messages"] if m.get("role") == "user"] == ["hello"]
