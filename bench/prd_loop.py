"""The PRD loop's own overhead per story: everything but the provider and the checks.

    python bench/prd_loop.py [--stories 50] [--rounds 3]

An embedded nats-server, the engine and the real prd service in this process; a fixture git
repository; a PRD of ``--stories`` stories; a provider that answers at once (it writes one file
per story, so each story is committed) and no check commands. What a story costs is then the
loop's own work: prd.json saved (atomically) around each transition, the loop record's CAS
writes, the prompt, the events (one line each in events.jsonl, one JetStream publish each),
``git add`` + ``git commit`` of the story, progress.md and agent.log.

Per story: the time between two consecutive ``prd.story.state_changed → passed`` events.
Printed with the in-run baseline, measured in the same process right after: one bare
``git commit`` of one file + one KV put + one JetStream publish, and the ratio.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import logging
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from jidocode.services.prd import service as prd_service
from jidocode.services.prd.config import PrdConfig
from jidocode.services.prd.loop import LoopSettings
from jidocode.services.prd.providers.base import (
    IterationRequest,
    IterationResult,
    ProviderCapabilities,
    ProviderEvent,
)
from jidocode.services.registry import serve_many
from jidocode.shared import subjects
from jidocode.shared.bus import Bus
from jidocode.shared.clients import EngineClient
from jidocode.shared.clients._prd import PrdClient
from jidocode.shared.config import Config
from jidocode.shared.envelope import Envelope
from jidocode.shared.events.prd import StoryDraft
from jidocode.shared.natsserver import NatsServer
from jidocode.shared.trust import trust_project


class _Run:
    def __init__(self, request: IterationRequest) -> None:
        self.request = request

    async def events(self) -> AsyncIterator[ProviderEvent]:
        story = self.request.metadata.get("story_id", "x")
        (Path(self.request.work_dir) / f"{story}.txt").write_text(story + "\n")
        yield ProviderEvent(kind="iteration_started")
        yield ProviderEvent(kind="iteration_finished", ok=True, text="done")

    async def result(self) -> IterationResult:
        return IterationResult(ok=True, summary="done")

    async def cancel(self) -> None:
        return None


class InstantProvider:
    def name(self) -> str:
        return "instant"

    def capabilities(self) -> ProviderCapabilities:
        return ProviderCapabilities(streaming=True, tool_calls=False, sandbox_control=False)

    async def run_iteration(self, request: IterationRequest) -> _Run:
        return _Run(request)


def _git(cwd: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


def _repo(root: Path) -> None:
    root.mkdir(parents=True)
    _git(root, "init", "-q", "-b", "main")
    _git(root, "config", "user.name", "Bench")
    _git(root, "config", "user.email", "bench@example.invalid")
    (root / "README.md").write_text("bench\n")
    _git(root, "add", "README.md")
    _git(root, "commit", "-q", "-m", "initial")


def _stats(values: list[float]) -> tuple[float, float]:
    ordered = sorted(values)
    return statistics.median(ordered), ordered[min(len(ordered) - 1, int(len(ordered) * 0.9))]


async def _baseline(bus: Bus, root: Path, rounds: int) -> list[float]:
    """One bare ``git add`` + ``git commit`` of one file, one KV put, one JetStream publish."""
    kv = await bus.kv("bench_prd_baseline", history=1)
    await bus.ensure_stream("BENCH_PRD_BASELINE", ["bench.prd.>"])
    out: list[float] = []
    for n in range(rounds):
        t0 = time.perf_counter()
        (root / f"baseline-{n}.txt").write_text(f"{n}\n")
        await asyncio.to_thread(_git, root, "add", "-A")
        await asyncio.to_thread(_git, root, "commit", "-q", "-m", f"baseline {n}")
        await kv.put("key", json.dumps({"n": n}).encode())
        await bus.js.publish("bench.prd.x", b'{"n": %d}' % n, headers={"Nats-Msg-Id": f"b{n}"})
        out.append((time.perf_counter() - t0) * 1000)
    return out


async def main(stories: int, rounds: int) -> None:
    base = Path(tempfile.mkdtemp(prefix="bench-prd-"))
    home = base / "home"
    home.mkdir()
    (home / "settings.json").write_text(json.dumps({"prd": {"quality_commands": []}}))
    root = base / "repo"
    _repo(root)
    trust_project(root, home=home)
    os.environ["JIDO_CODE_HOME"] = str(home)
    server = NatsServer(store_dir=base / "js", sync="default").start()
    config = Config(nats_url=server.url, jido_home=home, instance="bench")
    provider = InstantProvider()

    def resolve(key: str, project_id: str, cfg: PrdConfig) -> InstantProvider:
        return provider

    stop = asyncio.Event()
    tasks = [
        asyncio.create_task(serve_many(config, stop, names=("engine",))),
        asyncio.create_task(
            prd_service.serve(config, stop, resolve_provider=resolve, settings=LoopSettings())  # type: ignore[arg-type]
        ),
    ]
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from tests.helpers import wait_for_services

    await wait_for_services(config, names=("engine", "prd"), timeout=60)
    bus = await Bus.connect(config, "bench")
    per_story: list[float] = []
    try:
        info = await EngineClient(bus).start_project(str(root), timeout=30)
        prds = PrdClient(bus, info.project_id, timeout=60)
        for r in range(rounds):
            name = f"bench{r}"
            passed: list[float] = []
            done = asyncio.Event()

            async def on_event(
                env: Envelope, passed: list[float] = passed, done: asyncio.Event = done
            ) -> None:
                data: dict[str, Any] = env.data
                if env.type == "prd.story.state_changed" and data.get("to_state") == "passed":
                    passed.append(time.perf_counter())
                if env.type == "prd.loop.state_changed" and data.get("to_state") in ("completed", "error"):
                    done.set()

            sub = await bus.subscribe(subjects.prd_event_filter(info.project_id, name), on_event)
            await prds.create(name, stories=[StoryDraft(title=f"story {i}") for i in range(stories)])
            started = time.perf_counter()
            await prds.run(name)
            await asyncio.wait_for(done.wait(), 600)
            await sub.unsubscribe()
            per_story += [(b - a) * 1000 for a, b in itertools.pairwise(passed)]
            first_ms = (passed[0] - started) * 1000 if passed else 0.0
            loop = (await prds.get(name)).loop
            print(
                f"round {r}: {len(passed)} stories passed, loop {loop.state if loop else '?'}, "
                f"run request to first pass {first_ms:.0f} ms",
                file=sys.stderr,
            )
        base_ms = await _baseline(bus, root, max(20, stories))
    finally:
        await bus.close()
        stop.set()
        await asyncio.gather(*tasks)
        server.stop()
    med, p90 = _stats(per_story)
    bmed, bp90 = _stats(base_ms)
    print(f"PRD loop, {stories} stories x {rounds} rounds, instant provider, no checks, embedded NATS")
    print(f"  per story:  median {med:.1f} ms  p90 {p90:.1f} ms  (n={len(per_story)})")
    print(
        f"  baseline (git add+commit + KV put + JetStream publish): median {bmed:.1f} ms  p90 {bp90:.1f} ms"
    )
    print(f"  ratio per story / baseline (medians): {med / bmed:.2f}")
    print(f"  load average: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--stories", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    asyncio.run(main(args.stories, args.rounds))
