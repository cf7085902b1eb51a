"""Live turns while the conversation service crashes, with many idle conversations loaded.

    python bench/crash_recovery.py [--idle 480] [--live 50] [--turns 3]

Issue 31, point 4 ("recovery by need"): after a crash, the conversations with work pending are
taken first and idle ones stay unloaded until their next input, so the live turns of a crash
are not held up by reloading everything. ``jidocode up`` runs in a process of its own with the
scripted OpenAI-compatible model on loopback (as ``bench/soak.py``). The script

1. makes ``--idle`` conversations that each took one turn and are left idle (still loaded); the
   model answers each call after ``--model-delay`` seconds (2 s: a live turn is a model's time);
2. runs ``--live`` conversations taking ``--turns`` turns each, one after the other: the
   no-crash round;
3. runs the same again, and once a quarter of its turns are answered kills the conversation
   service with SIGKILL (``up`` starts it again): the crash round.

Prints each round's turn latency (median and p99), the ratio of the p99s (goal: at most 2), the
failed turns, and how many conversations the restarted service rebuilt (from its log: idle ones
should not be among them).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import signal
import statistics
import sys
import tempfile
import time
from collections import deque
from pathlib import Path
from typing import Any

_HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _HERE]
sys.path.insert(0, str(_HERE.parent))

from bench.soak import Up  # noqa: E402
from jidocode.cli.dev.scripted_llm import Reply, ScriptedLlm  # noqa: E402
from jidocode.client import JidoClient  # noqa: E402
from jidocode.shared.bus import Bus  # noqa: E402

#: A line of the conversation service's log for each conversation it loads.
_REBUILT = re.compile(r"conversation \S+ rebuilt from \d+ journal entries")


def answerer(delay_s: float) -> Any:
    """The scripted model: a short answer after ``delay_s`` (a model's think time)."""

    def answer(body: dict[str, Any]) -> Reply:
        return Reply.answer(f"answer {len(body.get('messages') or [])}", delay_s=delay_s)

    return answer


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


class Rebuilds(deque[str]):
    """``up``'s last output lines, counting the conversation service's "rebuilt from" lines (one
    per conversation it loads) seen after :meth:`mark`."""

    def __init__(self) -> None:
        super().__init__(maxlen=40)
        self.seen = 0
        self.at_mark = 0
        self.marked_at: float | None = None
        #: Seconds after the mark of the first and the last rebuild.
        self.first: float | None = None
        self.last: float | None = None

    def append(self, line: str) -> None:
        if _REBUILT.search(line):
            self.seen += 1
            if self.marked_at is not None:
                after = time.monotonic() - self.marked_at
                self.first = after if self.first is None else self.first
                self.last = after
        super().append(line)

    def mark(self) -> None:
        self.at_mark = self.seen
        self.marked_at = time.monotonic()

    def since_mark(self) -> int:
        return self.seen - self.at_mark


async def make_idle(bus: Bus, project: Path, count: int, workers: int = 8) -> None:
    """``count`` conversations that took one turn each and are now idle."""

    async def worker(n: int) -> None:
        client = await JidoClient.connect(project_dir=project, bus=bus)
        try:
            for _ in range(n):
                await client.start_conversation()
                await client.send_message("hello", timeout=120)
        finally:
            await client.close()

    share = [count // workers + (1 if i < count % workers else 0) for i in range(workers)]
    await asyncio.gather(*(worker(n) for n in share if n))


class Round:
    """``live`` conversations taking ``turns`` turns each; their latencies and failures."""

    def __init__(self) -> None:
        self.latencies: list[float] = []
        self.failures = 0
        self.answered = 0

    async def run(self, bus: Bus, project: Path, live: int, turns: int) -> None:
        async def one() -> None:
            client = await JidoClient.connect(project_dir=project, bus=bus)
            try:
                await client.start_conversation()
                for n in range(turns):
                    t0 = time.perf_counter()
                    try:
                        await client.send_message(f"turn {n}", timeout=300)
                        self.latencies.append(time.perf_counter() - t0)
                    except Exception as exc:  # counted; the round goes on
                        self.failures += 1
                        print(f"turn failed: {type(exc).__name__}: {exc}", flush=True)
                    self.answered += 1
            finally:
                await client.close()

        await asyncio.gather(*(one() for _ in range(live)))


async def kill_when(up: Up, round_: Round, at: int, rebuilds: Rebuilds) -> float:
    """SIGKILL the conversation service once ``at`` turns of ``round_`` are answered; when."""
    while round_.answered < at:  # noqa: ASYNC110 (a counter: polled, a benchmark)
        await asyncio.sleep(0.05)
    pid = up.processes().get("conversation")
    if pid is None:
        raise RuntimeError("no conversation service found under up")
    rebuilds.mark()
    os.kill(pid, signal.SIGKILL)
    print(f"killed the conversation service (pid {pid}) after {at} answered turns", flush=True)
    return time.monotonic()


def line(name: str, values: list[float]) -> str:
    return f"{name:<10} {len(values):4d} turns   median {statistics.median(values):7.3f} s   p99 {pct(values, 0.99):7.3f} s"


async def main(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory(prefix="jido-crash-") as tmp_name:
        tmp = Path(tmp_name)
        project = tmp / "proj"
        project.mkdir()
        async with ScriptedLlm(responder=answerer(args.model_delay)) as llm:
            up = Up(tmp, llm)
            rebuilds = Rebuilds()
            up.tail = rebuilds  # the drain thread appends every line of up's output to it
            try:
                config = await up.ready()
                bus = await Bus.connect(config, "crash-bench")
                t0 = time.monotonic()
                await make_idle(bus, project, args.idle)
                print(f"{args.idle} idle conversations made in {time.monotonic() - t0:.1f} s", flush=True)
                calm = Round()
                await calm.run(bus, project, args.live, args.turns)
                crash = Round()
                killer = asyncio.create_task(
                    kill_when(up, crash, max(1, args.live * args.turns // 4), rebuilds)
                )
                await crash.run(bus, project, args.live, args.turns)
                await killer
                print(line("no crash", calm.latencies))
                print(line("crash", crash.latencies))
                ratio = pct(crash.latencies, 0.99) / pct(calm.latencies, 0.99)
                print(f"p99 crash / no crash: {ratio:.2f}   (goal <= 2)")
                print(f"failed turns: no crash {calm.failures}, crash {crash.failures}")
                print(
                    f"conversations rebuilt after the kill: {rebuilds.since_mark()} "
                    f"(live {args.live}, idle {args.idle}; idle ones should stay unloaded), "
                    f"the first {rebuilds.first or 0:.1f} s and the last {rebuilds.last or 0:.1f} s after it"
                )
                await bus.close()
            finally:
                up.stop()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--idle", type=int, default=480, help="idle conversations loaded before the crash")
    parser.add_argument("--live", type=int, default=50, help="conversations taking turns")
    parser.add_argument("--turns", type=int, default=3, help="turns each live conversation takes per round")
    parser.add_argument("--model-delay", type=float, default=2.0, help="seconds the model takes to answer")
    asyncio.run(main(parser.parse_args()))
