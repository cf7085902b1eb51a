"""A turn that fans out to 5 sub-agents (each doing one tool call) vs the same 5 tool calls made
by one conversation in one turn.

    python bench/subagents.py [--rounds 8] [--fanout 5] [--services inline|processes]

Every service runs (inline: in this process; processes: one process each, as ``jidocode up``),
the model is the scripted OpenAI-compatible server behind the real litellm adapter, the tool
calls are real ``read_file`` calls through the tool runner. The SDK sends one message and
waits for the final answer:

* **direct**: the model answers with ``fanout`` ``read_file`` calls, then with text
  (2 model calls, ``fanout`` tool calls);
* **fan-out**: the model answers with ``fanout`` ``task`` calls; each child conversation gets
  one ``read_file`` call and answers; then the parent answers (2 + 2 x ``fanout`` model calls,
  ``fanout`` child conversations started, fed and followed, ``fanout`` tool calls).

Rounds alternate between the two. Prints the median and p90 of each and the ratio
fan-out / direct: the price of a child conversation per parallel job.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"

from jidocode.cli.dev.scripted_llm import Reply, ScriptedLlm, call
from jidocode.client import JidoClient
from jidocode.services.registry import SERVICES, serve_many
from jidocode.shared.config import Config
from jidocode.shared.natsserver import NatsServer
from jidocode.shared.runner import tune_gc
from jidocode.shared.trust import trust_project

MODEL = "openai/scripted"


def responder(fanout: int) -> Any:
    """Stateless: what to answer depends on the first user message and the answers so far."""

    def respond(body: dict[str, Any]) -> Reply:
        messages = body.get("messages") or []
        first = str(next((m.get("content") for m in messages if m.get("role") == "user"), ""))
        turn = sum(1 for m in messages if m.get("role") == "assistant")
        if turn >= 1:
            return Reply.answer("done")
        if first.startswith("direct"):
            return Reply.tools(*(call("read_file", path=f"f{i}.txt") for i in range(fanout)))
        if first.startswith("fanout"):
            return Reply.tools(
                *(
                    call("task", description=f"read f{i}", prompt=f"child: read f{i}.txt")
                    for i in range(fanout)
                )
            )
        if first.startswith("child: read "):
            return Reply.tools(call("read_file", path=first.removeprefix("child: read ")))
        return Reply.error(500, f"no script for {first!r}")

    return respond


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def start_processes(config: Config) -> list[asyncio.subprocess.Process]:
    env = {**os.environ, "NATS_URL": config.nats_url, "JIDO_CODE_HOME": str(config.jido_home)}
    return [
        await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            f"jidocode.services.{name}",
            env={**env, "JIDO_INSTANCE": f"bench-{name}"},
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.DEVNULL,
        )
        for name in SERVICES
    ]


async def main(rounds: int, fanout: int, services: str) -> None:
    logging.basicConfig(level=logging.CRITICAL)
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        home = base / "home"
        home.mkdir()
        os.environ["JIDO_CODE_HOME"] = str(home)
        os.environ["JIDO_CONV_SUBAGENTS_MAX_PER_CONVERSATION"] = str(max(4, fanout))
        root = base / "proj"
        (root / ".jido").mkdir(parents=True)
        (root / ".jido" / "settings.json").write_text(json.dumps({"permissions": {"allow": ["Read"]}}))
        for i in range(fanout):
            (root / f"f{i}.txt").write_text(f"file {i}\n")
        trust_project(root, home=home)
        server = NatsServer(store_dir=base / "js", sync="default").start()
        llm = await ScriptedLlm(responder=responder(fanout)).start()
        os.environ["JIDO_LLM_MODEL"] = MODEL
        os.environ["JIDO_LLM_API_BASE"] = llm.api_base
        config = Config(nats_url=server.url, jido_home=home, instance="bench")
        stop = asyncio.Event()
        task: asyncio.Task[Any] | None = None
        procs: list[asyncio.subprocess.Process] = []
        if services == "inline":
            task = asyncio.create_task(serve_many(config, stop))
        else:
            procs = await start_processes(config)
        try:
            sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
            from tests.helpers import wait_for_services

            await wait_for_services(config, SERVICES, timeout=120)
            if services == "inline":
                tune_gc()
            client = await JidoClient.connect(project_dir=root, nats_url=server.url)
            try:

                async def turn(kind: str) -> float:
                    await client.start_conversation()
                    t0 = time.perf_counter()
                    answer = await client.send_message(f"{kind} please", timeout=120)
                    elapsed = time.perf_counter() - t0
                    assert answer == "done", answer
                    return elapsed

                for kind in ("direct", "fanout", "direct", "fanout"):  # warm up
                    await turn(kind)
                times: dict[str, list[float]] = {"direct": [], "fanout": []}
                for _ in range(rounds):
                    for kind in ("direct", "fanout"):
                        times[kind].append(await turn(kind))
            finally:
                await client.close()
            direct, fan = times["direct"], times["fanout"]
            print(f"services: {services}; {rounds} rounds; {fanout} jobs per turn")
            for name, values in (
                ("direct (1 conversation, 5 tool calls)", direct),
                ("fan-out (5 sub-agents)", fan),
            ):
                print(
                    f"{name:40s} median {statistics.median(values) * 1000:7.1f} ms   "
                    f"p90 {pct(values, 0.9) * 1000:7.1f} ms"
                )
            print(
                f"ratio fan-out / direct (medians): {statistics.median(fan) / statistics.median(direct):.2f}"
            )
        finally:
            stop.set()
            if task is not None:
                await asyncio.wait_for(task, 30)
            for proc in procs:
                proc.terminate()
                await proc.wait()
            await llm.stop()
            server.stop()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--fanout", type=int, default=5)
    parser.add_argument("--services", choices=("inline", "processes"), default="inline")
    args = parser.parse_args()
    asyncio.run(main(args.rounds, args.fanout, args.services))
