"""What a PRD provider itself costs per iteration, against the same work done bare.

    PYTHONPATH=. .venv/bin/python bench/prd_providers.py [--runs 20] [--replays 2000]

Three figures, each with its in-run baseline:

* **mapping**: the three golden sessions through ``normalize`` + the sequencer, per native line
  (pure Python; baseline: ``json.loads`` of the same lines);
* **cli**: one ``codex`` iteration against a fake CLI (``/usr/bin/python3`` replaying the golden
  session) through the real sandbox and runner, until the result; baseline: the same fake
  started bare with asyncio and read to its end (so the difference is the sandbox launch,
  the runner and the mapping);
* **jidocode**: one iteration of the default provider (project opened, new conversation, one
  scripted answer, actor stopped) on every service in this process and real litellm against
  the scripted model; baseline: the same turn through the client SDK (``JidoClient``: a new
  conversation, ``send_message``).

Prints medians and p90 in milliseconds (µs for the mapping) and the ratios.
"""

# ruff: noqa: E402  (the path fix and the env var come before the imports on purpose)
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

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
# run as a script, this folder comes first on sys.path: keep its modules from shadowing packages
sys.path[:] = [
    p for p in sys.path if os.path.realpath(p or ".") != os.path.dirname(os.path.realpath(__file__))
]
# the checkout's root, for the test helpers this uses (tests.helpers)
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.realpath(__file__))))

from jidocode.cli.dev.scripted_llm import Reply, ScriptedLlm
from jidocode.client import JidoClient
from jidocode.services.prd.config import ProviderSettings
from jidocode.services.prd.providers import claude, codex, gemini
from jidocode.services.prd.providers.base import IterationRequest, ProviderContext
from jidocode.services.prd.providers.registry import ProviderRegistry
from jidocode.services.prd.providers.sequence import replay
from jidocode.services.registry import serve_many
from jidocode.shared.bus import Bus
from jidocode.shared.config import Config
from jidocode.shared.natsserver import NatsServer
from jidocode.shared.trust import trust_project
from tests.helpers import wait_for_services

GOLDEN = Path(__file__).resolve().parents[1] / "tests" / "golden" / "prd"
FAKE = """#!/usr/bin/python3
import sys
sys.stdin.read()
sys.stdout.write(open(sys.argv[1]).read())
"""


def _stats(values: list[float]) -> tuple[float, float]:
    values = sorted(values)
    return statistics.median(values), values[min(len(values) - 1, int(len(values) * 0.9))]


def mapping(replays: int) -> None:
    sessions = [
        (key, module.normalize, (GOLDEN / key / "session.jsonl").read_text().splitlines())
        for key, module in (("codex", codex), ("claude", claude), ("gemini", gemini))
    ]
    lines = sum(len(s[2]) for s in sessions)
    t0 = time.perf_counter()
    for _ in range(replays):
        for key, normalize, session in sessions:
            replay(key, normalize, session)
    mapped = (time.perf_counter() - t0) / (replays * lines) * 1e6
    t0 = time.perf_counter()
    for _ in range(replays):
        for _key, _normalize, session in sessions:
            for line in session:
                json.loads(line)
    parsed = (time.perf_counter() - t0) / (replays * lines) * 1e6
    print(
        f"mapping   {mapped:8.1f} us/line   json.loads alone {parsed:6.1f} us/line   ratio {mapped / parsed:5.1f}"
    )


async def cli(runs: int, base: Path) -> None:
    bin_dir = base / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "codex"
    fake.write_text(FAKE)
    fake.chmod(0o755)
    golden = bin_dir / "session.jsonl"
    golden.write_text((GOLDEN / "codex" / "session.jsonl").read_text())
    work = base / "work"
    work.mkdir()
    provider = ProviderRegistry({"codex": ProviderSettings(command=str(fake), args=[str(golden)])}).resolve(
        "codex", ProviderContext(additional_directories=(str(bin_dir),))
    )
    request = IterationRequest(work_dir=str(work), prompt="bench")
    sandboxed: list[float] = []
    bare: list[float] = []
    for _ in range(runs):
        t0 = time.perf_counter()
        run = await provider.run_iteration(request)
        events = [e async for e in run.events()]
        result = await run.result()
        sandboxed.append((time.perf_counter() - t0) * 1000)
        assert result.ok and len(events) > 5, result
        t0 = time.perf_counter()
        proc = await asyncio.create_subprocess_exec(
            str(fake),
            str(golden),
            "exec",
            "--json",
            "-",
            cwd=work,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
        )
        out, _ = await proc.communicate(b"bench")
        bare.append((time.perf_counter() - t0) * 1000)
        assert out
    (m, p), (bm, bp) = _stats(sandboxed), _stats(bare)
    mode = result.metadata.get("sandbox", "?")
    print(
        f"cli       {m:8.1f} ms (p90 {p:6.1f})  bare process {bm:6.1f} ms (p90 {bp:6.1f})  "
        f"ratio {m / bm:5.1f}  sandbox={mode}"
    )


async def jidocode(runs: int, base: Path) -> None:
    home = base / "home"
    home.mkdir()
    root = base / "proj"
    (root / ".jido").mkdir(parents=True)
    trust_project(root, home=home)
    os.environ["JIDO_CODE_HOME"] = str(home)
    server = NatsServer(store_dir=base / "js", sync="default").start()
    config = Config(nats_url=server.url, jido_home=home, instance="bench")
    stop = asyncio.Event()
    task = asyncio.create_task(serve_many(config, stop))
    try:
        async with ScriptedLlm(responder=lambda body: Reply.answer("done")) as llm:
            settings = {"model": "openai/scripted", "api_base": llm.api_base, "max_retries": 0}
            (root / ".jido" / "settings.json").write_text(json.dumps({"llm": settings}))
            await wait_for_services(config, timeout=90)
            bus = await Bus.connect(config, "bench")
            try:
                provider = ProviderRegistry().resolve("jidocode", ProviderContext(bus=bus))
                sdk = await JidoClient.connect(project_dir=root, bus=bus, config=config)
                request = IterationRequest(work_dir=str(root), prompt="bench")
                timed: list[float] = []
                bare: list[float] = []
                for i in range(runs + 1):
                    t0 = time.perf_counter()
                    run = await provider.run_iteration(request)
                    _ = [e async for e in run.events()]
                    result = await run.result()
                    elapsed = (time.perf_counter() - t0) * 1000
                    assert result.ok, result
                    t0 = time.perf_counter()
                    await sdk.start_conversation()
                    answer = await sdk.send_message("bench", timeout=60)
                    elapsed_sdk = (time.perf_counter() - t0) * 1000
                    assert answer == "done"
                    if i:  # the first of each warms litellm and the actors up
                        timed.append(elapsed)
                        bare.append(elapsed_sdk)
                (m, p), (bm, bp) = _stats(timed), _stats(bare)
                print(
                    f"jidocode  {m:8.1f} ms (p90 {p:6.1f})  client SDK turn {bm:6.1f} ms (p90 {bp:6.1f})  "
                    f"ratio {m / bm:5.2f}"
                )
            finally:
                await bus.close()
    finally:
        stop.set()
        await asyncio.wait_for(task, 30)
        server.stop()


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--replays", type=int, default=2000)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    print(f"python {sys.version.split()[0]}, load {os.getloadavg()[0]:.2f}, {args.runs} runs")
    mapping(args.replays)
    with tempfile.TemporaryDirectory() as tmp:
        await cli(args.runs, Path(tmp))
    with tempfile.TemporaryDirectory() as tmp:
        await jidocode(args.runs, Path(tmp))


if __name__ == "__main__":
    asyncio.run(main())
