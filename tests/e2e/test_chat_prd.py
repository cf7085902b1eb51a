"""``/prd`` in ``jidocode chat`` end to end: every service on a real nats-server and the scripted
model (the ``system`` fixture of ``test_chat``), the real CLI (typer's runner in a thread, and a
subprocess where Ctrl-C must reach it). ``/prd`` lists the
project's PRDs, ``/prd status`` shows one, ``/prd run`` starts its loop (git in the sandbox, the
``jidocode`` provider on the scripted model) and follows it until Ctrl-C, which leaves the loop
running."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys

import pytest
from click.testing import Result
from typer.testing import CliRunner

from jidocode.cli.dev.scripted_llm import Reply
from jidocode.cli.main import app
from jidocode.shared.clients import EngineClient, PrdClient
from jidocode.shared.events.prd import StoryDraft
from tests.e2e.test_chat import System

pytestmark = pytest.mark.slow

WAIT = 90.0


async def _chat(system: System, root: str, line: str) -> Result:
    """``jidocode chat <root> <line>`` as a terminal runs it (its own event loop, in a thread)."""
    env = {"NATS_URL": system.config.nats_url, "COLUMNS": "200"}
    return await asyncio.wait_for(
        asyncio.to_thread(CliRunner().invoke, app, ["chat", root, line], env=env), WAIT
    )


def _git(system: System, *args: str) -> None:
    subprocess.run(["git", *args], cwd=system.project, check=True, capture_output=True, timeout=30)


async def test_prd_in_chat_lists_shows_runs_and_follows_a_loop(system: System) -> None:
    _git(system, "init", "-q", "-b", "main")
    _git(system, "-c", "user.name=F", "-c", "user.email=f@example.invalid", "add", "-A")
    _git(system, "-c", "user.name=F", "-c", "user.email=f@example.invalid", "commit", "-q", "-m", "initial")
    info = await EngineClient(system.bus, timeout=30).start_project(str(system.project))
    prds = PrdClient(system.bus, info.project_id, timeout=30)
    story = StoryDraft(title="Greeting [bold]page[/bold]", acceptance_criteria=["says hello"])
    await prds.create("greet", title="Greet", stories=[story])
    root = str(system.project)

    listed = await _chat(system, root, "/prd")
    assert listed.exit_code == 0, listed.output
    assert "greet  ready  0/1 passed  Greet" in listed.stdout
    shown = await _chat(system, root, "/prd status greet")
    assert shown.exit_code == 0, shown.output
    assert "PRD greet  ready" in shown.stdout and "· US-001 Greeting [bold]page[/bold]" in shown.stdout

    # the model takes its time: the loop is mid-iteration when the user presses Ctrl-C
    system.llm.script(Reply.answer("working on it", delay_s=300))
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "jidocode.cli.main",
        "chat",
        root,
        "/prd run greet",
        env={**os.environ, "NATS_URL": system.config.nats_url, "COLUMNS": "200"},
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    assert proc.stderr is not None
    try:
        line = await asyncio.wait_for(proc.stderr.readline(), WAIT)
        while b"Ctrl-C stops following" not in line:
            assert line, "the chat ended before following the loop"
            line = await asyncio.wait_for(proc.stderr.readline(), WAIT)
        await system.llm.wait_requests(1, timeout=WAIT)  # the story's iteration asked the model
        proc.send_signal(signal.SIGINT)
        raw_out, raw_err = await asyncio.wait_for(proc.communicate(), WAIT)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    out, err = raw_out.decode(), raw_err.decode()
    assert proc.returncode == 0, (out, err)
    assert "loop ready → running" in out and "━━ story US-001 · attempt 1 · jidocode" in out
    assert "stopped following greet; the loop runs on: /prd status greet" in " ".join(err.split())
    view = await prds.get("greet")
    assert view.loop is not None and view.loop.state == "running"  # Ctrl-C left it running
    await prds.stop("greet")
