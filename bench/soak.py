"""A soak: conversations for half an hour against ``jidocode up``, and each process's memory.

    python bench/soak.py [--minutes 30] [--workers 8] [--turns-per-conversation 20]

``jidocode up`` runs in a process of its own (its embedded nats-server, every service and the
gateway, each a process) with the scripted OpenAI-compatible model on loopback as the LLM.
``--workers`` clients each hold one conversation at a time, send it a message as soon as the
last one is answered and, after ``--turns-per-conversation`` turns, start a new one: the
conversations made add up as they do for a user. Compaction is on: the model reports a prompt
that grows with the history (8,000 tokens a message), so a conversation compacts every few
turns (``compact_at`` 0.5 of the default 128k window).

Prints the resident memory (VmRSS) of ``up``, nats-server and each service once the first turns
are answered (the start, after warm-up), every ``--every`` seconds, and at the end, with the
turns, conversations and compactions done. docs/benchmarks.md ("Soak") says what grows and why.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import deque
from pathlib import Path
from typing import Any

# Run as a script, this file's folder comes first on sys.path, where a module named like a
# package the services import would shadow it; the checkout's root gives ``tests.helpers``.
_HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _HERE]
sys.path.insert(0, str(_HERE.parent))

from jidocode.cli.dev.scripted_llm import Reply, ScriptedLlm  # noqa: E402
from jidocode.client import JidoClient  # noqa: E402
from jidocode.services.registry import SERVICES  # noqa: E402
from jidocode.shared import subjects  # noqa: E402
from jidocode.shared.bus import Bus  # noqa: E402
from jidocode.shared.config import CLIENT_USER, Config, read_credentials  # noqa: E402
from jidocode.shared.events.conversation import CompactionCompleted  # noqa: E402
from jidocode.shared.natsserver import free_port  # noqa: E402
from tests.helpers import wait_for_services  # noqa: E402

#: Services run as ``python -I -m jidocode.services.<name>`` (shared/runner.py).
_SERVICES_PACKAGE = "jidocode.services."
#: Prompt tokens the model reports per message of the request (compaction every few turns).
TOKENS_PER_MESSAGE = 8000


def soak_responder(body: dict[str, Any]) -> Reply:
    """An answer at once, reporting a prompt that grows with the history (a summary request too)."""
    messages = body.get("messages") or []
    prompt = min(120_000, TOKENS_PER_MESSAGE * len(messages))
    return Reply.answer(f"answer {len(messages)}: " + "words " * 40, prompt_tokens=prompt)


def rss_mib(pid: int) -> float | None:
    """The process's resident memory in MiB (``None`` once it is gone)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def descendants(pid: int) -> list[int]:
    """Every process under ``pid`` (Linux's ``/proc/<pid>/task/*/children``)."""
    found: list[int] = []
    todo = [pid]
    while todo:
        parent = todo.pop()
        for task in Path(f"/proc/{parent}/task").glob("*"):
            try:
                kids = [int(k) for k in (task / "children").read_text().split()]
            except OSError:
                continue
            found += kids
            todo += kids
    return found


class Up:
    """``jidocode up`` in a process of its own, its output drained (the last lines kept)."""

    def __init__(self, tmp: Path, llm: ScriptedLlm) -> None:
        env = {k: v for k, v in os.environ.items() if k != "NATS_URL"}
        self.data_home = tmp / "data"
        env.update(
            JIDO_DATA_HOME=str(self.data_home),
            JIDO_CODE_HOME=str(tmp / "home"),
            JIDO_LLM_MODEL="openai/scripted",
            JIDO_LLM_API_BASE=llm.api_base,
            JIDO_GATEWAY_PORT=str(free_port()),
            LITELLM_LOCAL_MODEL_COST_MAP="True",
            PYTHONUNBUFFERED="1",
        )
        self.port = free_port()
        cmd = [sys.executable, "-m", "jidocode.cli.main", "up", "--port", str(self.port), "--grace", "5"]
        self.proc = subprocess.Popen(
            cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        self.tail: deque[str] = deque(maxlen=40)
        threading.Thread(target=self._drain, daemon=True).start()

    def _drain(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.tail.append(line.rstrip())

    def client_config(self) -> Config:
        url = f"nats://127.0.0.1:{self.port}"
        creds = read_credentials(CLIENT_USER, self.data_home)
        if creds is None:
            raise RuntimeError("up wrote no client credentials:\n" + "\n".join(self.tail))
        return Config(nats_url=url, nats_user=creds.user, nats_password=creds.password)

    async def ready(self, timeout: float = 180.0) -> Config:
        """The client's config once every service answers."""
        deadline = time.monotonic() + timeout
        while read_credentials(CLIENT_USER, self.data_home) is None:
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("up did not start:\n" + "\n".join(self.tail))
            await asyncio.sleep(0.2)
        config = self.client_config()
        await wait_for_services(config, SERVICES, timeout=max(1.0, deadline - time.monotonic()))
        return config

    def processes(self) -> dict[str, int]:
        """``up`` and its children by name (a service's name from its command line)."""
        named = {"up": self.proc.pid}
        for pid in descendants(self.proc.pid):
            try:
                argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            words = [a.decode(errors="replace") for a in argv if a]
            module = next((w for w in words if w.startswith(_SERVICES_PACKAGE)), None)
            name = module[len(_SERVICES_PACKAGE) :] if module else None
            if name is None and words and words[0].endswith("nats-server"):
                name = "nats-server"
            if name is not None:
                named[name if name not in named else f"{name}#{pid}"] = pid
        return named

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()


class Load:
    """``workers`` clients taking turns until ``deadline``; counts what they did."""

    def __init__(self, bus: Bus, project: Path, turns_per_conversation: int) -> None:
        self.bus = bus
        self.project = project
        self.turns_per_conversation = turns_per_conversation
        self.turns = 0
        self.conversations = 0
        self.failures = 0
        self.first_turns = asyncio.Event()

    async def worker(self, deadline: float, workers: int) -> None:
        client = await JidoClient.connect(
            project_dir=self.project, bus=self.bus, settings={"compact_at": 0.5}
        )
        try:
            while time.monotonic() < deadline:
                await client.start_conversation()
                self.conversations += 1
                for n in range(self.turns_per_conversation):
                    if time.monotonic() >= deadline:
                        break
                    try:
                        await client.send_message(f"turn {n}: tell me more", timeout=120)
                        self.turns += 1
                    except Exception as exc:  # a failed turn is counted; the soak goes on
                        self.failures += 1
                        print(f"turn failed: {type(exc).__name__}: {exc}", flush=True)
                    if self.turns >= workers:
                        self.first_turns.set()
        finally:
            await client.close()


def print_rss(label: str, up: Up, start: dict[str, float] | None = None) -> dict[str, float]:
    now = {name: rss for name, pid in sorted(up.processes().items()) if (rss := rss_mib(pid)) is not None}
    cells = []
    for name, rss in now.items():
        grown = "" if start is None or name not in start else f" ({rss - start[name]:+.1f})"
        cells.append(f"{name} {rss:.1f}{grown}")
    print(f"{label:>8}  RSS MiB: " + ", ".join(cells), flush=True)
    return now


async def compactions(bus: Bus) -> int:
    """``conversation.compaction.completed`` events stored (the output stream)."""
    done = f"{subjects.PREFIX}.evt.*.*.{subjects.type_tokens(CompactionCompleted.TYPE)}"
    info = await bus.js.stream_info(subjects.STREAM_EVENTS, subjects_filter=done)
    return sum((info.state.subjects or {}).values())


async def main(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory(prefix="jido-soak-") as tmp_name:
        tmp = Path(tmp_name)
        (tmp / "proj").mkdir()
        async with ScriptedLlm(responder=soak_responder) as llm:
            up = Up(tmp, llm)
            try:
                config = await up.ready()
                bus = await Bus.connect(config, "soak")
                load = Load(bus, tmp / "proj", args.turns_per_conversation)
                deadline = time.monotonic() + args.minutes * 60
                tasks = [
                    asyncio.create_task(load.worker(deadline, args.workers)) for _ in range(args.workers)
                ]
                await asyncio.wait_for(load.first_turns.wait(), 300)
                began = time.monotonic()
                start = print_rss("start", up)
                while not all(t.done() for t in tasks):
                    await asyncio.wait(tasks, timeout=args.every)
                    print_rss(f"{(time.monotonic() - began) / 60:.1f} min", up, start)
                await asyncio.gather(*tasks)
                print_rss("end", up, start)
                done = await compactions(bus)
                print(
                    f"{load.turns} turns in {load.conversations} conversations over "
                    f"{(time.monotonic() - began) / 60:.1f} min ({load.failures} failed), {done} compactions"
                )
                await bus.close()
            finally:
                up.stop()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=30.0, help="how long the load runs")
    parser.add_argument("--workers", type=int, default=8, help="conversations taking turns at once")
    parser.add_argument("--turns-per-conversation", type=int, default=20, help="turns before a new one")
    parser.add_argument("--every", type=float, default=60.0, help="seconds between RSS lines")
    asyncio.run(main(parser.parse_args()))
