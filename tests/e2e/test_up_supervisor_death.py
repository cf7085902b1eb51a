"""Issue 31, point 5: the children of `jidocode up` die with it, and a new `up` refuses while one lives."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path
from typing import IO

import pytest

from jidocode.cli.dev.scripted_llm import Reply, ScriptedLlm
from jidocode.cli.supervisor import LiveChild, _LiveFile, children_file, start_time
from jidocode.services.registry import RUNNABLE, SERVICES
from tests.e2e.test_up import UpProcess, _running, _until
from tests.helpers import wait_for_services

pytestmark = pytest.mark.slow

#: The issue's bound between `kill -9` of `up` and the end of its last child.
GONE_WITHIN_S = 2.0


async def test_kill_9_of_up_mid_turn_takes_every_child_within_2_s(tmp_path: Path) -> None:
    async with ScriptedLlm() as llm:
        llm.script(Reply.answer("too late", delay_s=300))  # a turn in flight: a drain would wait for it
        up = UpProcess(
            tmp_path, extra_env={"JIDO_LLM_MODEL": "openai/scripted", "JIDO_LLM_API_BASE": llm.api_base}
        )
        await up.start_reader()
        chat: asyncio.subprocess.Process | None = None
        try:
            url = (await up.wait_line(r"NATS listening on (nats://\S+)")).group(1)
            await wait_for_services(up.client_config(url), SERVICES, timeout=90)
            project = tmp_path / "proj"
            project.mkdir()
            env = {k: v for k, v in os.environ.items() if not k.startswith("NATS_")}
            chat = await asyncio.create_subprocess_exec(
                *[sys.executable, "-m", "jidocode.cli.main", "chat", str(project), "hello"],
                env={**env, "JIDO_DATA_HOME": up.data_home, "JIDO_CODE_HOME": str(tmp_path / "home")},
                stdout=asyncio.subprocess.DEVNULL,
                stderr=asyncio.subprocess.DEVNULL,
            )
            await llm.wait_requests(1, timeout=90)
            listed = _LiveFile.model_validate_json(children_file(Path(up.data_home)).read_bytes())
            pids = {c.pid for c in listed.children}
            assert len(pids) == len(RUNNABLE)  # every service and the gateway
            server = int((Path(up.data_home) / "nats" / "nats-server.pid").read_text())
            assert all(_running(pid) for pid in pids | {server})

            up.proc.kill()
            await asyncio.to_thread(up.proc.wait, 20)
            await _until(lambda: not any(_running(pid) for pid in pids | {server}), GONE_WITHIN_S)
        finally:
            if chat is not None and chat.returncode is None:
                chat.kill()
                await chat.wait()
            if up.proc.poll() is None:
                up.proc.kill()


def test_a_new_up_refuses_while_a_child_of_the_old_one_lives_naming_its_pid(tmp_path: Path) -> None:
    data_home = tmp_path / "data"
    data_home.mkdir()
    # a child an earlier up listed that outlived it (a platform without the parent-death signal)
    left = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])
    try:
        started = start_time(left.pid)
        assert started is not None
        listed = _LiveFile(
            supervisor=1, children=[LiveChild(pid=left.pid, started=started, label="conversation")]
        )
        children_file(data_home).write_text(listed.model_dump_json())
        env = {
            **{k: v for k, v in os.environ.items() if k != "NATS_URL"},
            "JIDO_DATA_HOME": str(data_home),
            "JIDO_CODE_HOME": str(tmp_path / "home"),
        }
        argv = [sys.executable, "-m", "jidocode.cli.main", "up", "--only", "engine"]
        refused = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120)
        said = " ".join(refused.stdout.split())
        assert refused.returncode == 1, said
        assert f"conversation (pid {left.pid})" in said and "still runs" in said, said
        assert "NATS listening" not in said  # nothing was started

        # once it is gone (or its pid belongs to another program), up starts
        left.kill()
        left.wait(10)
        proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        try:
            assert proc.stdout is not None
            # the per-test timeout bounds this read; up's end (EOF) ends it too
            assert _read_until(proc.stdout, "all 1 services ready"), (
                "up did not start once the child was gone"
            )
        finally:
            proc.terminate()
            proc.wait(60)
    finally:
        if left.poll() is None:
            left.kill()


def _read_until(stream: IO[str], text: str) -> bool:
    return any(text in line for line in stream)
