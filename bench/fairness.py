"""Fairness of the tool runner (issue 24, finding 11): another project's ``read_file`` latency
with 300 calls of one project queued behind its quota, against the same with that project idle.

    python bench/fairness.py [--calls 200] [--queued 300] [--held] [--quota-wait 30]

One nats-server, the engine and one tool runner as the service runs it (256 request slots).
Project A runs one call at a time (``max_concurrent_per_project: 1``); project B reads a 4 KiB
file.

1. **A idle**: ``--calls`` sequential ``read_file`` calls of B (the baseline).
2. **A flooded**: A runs one call that blocks (``flock`` on a file this script holds) and
   ``--queued`` more calls of A wait for A's quota; then the same ``read_file`` calls of B.
3. ``--held``: the flood again with the waiting room holding the request slot during the wait
   (the runner before decision 0306): one ``read_file`` of B, which waits until A's queued calls
   give up (``--quota-wait`` seconds, the service's default ``JIDO_TOOL_QUOTA_WAIT_S``).

Prints the median and p95 latency of B's reads in each case and the ratio flooded / idle.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import fcntl
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

# Run as a script, this file's folder comes first on sys.path, where a module named like a
# package the services import would shadow it.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]

from jidocode.services.engine.service import serve as serve_engine  # noqa: E402
from jidocode.services.tool_runner.service import ToolRunner  # noqa: E402
from jidocode.shared.bus import Bus  # noqa: E402
from jidocode.shared.clients import EngineClient, ToolsClient  # noqa: E402
from jidocode.shared.config import Config  # noqa: E402
from jidocode.shared.errors import JidoError  # noqa: E402
from jidocode.shared.events.tools import ToolCallMeta, ToolResult  # noqa: E402
from jidocode.shared.natsserver import NatsServer  # noqa: E402


def _stats(name: str, samples: list[float]) -> float:
    samples = sorted(samples)
    med = statistics.median(samples)
    p95 = samples[max(0, int(len(samples) * 0.95) - 1)]
    print(f"{name:<34} median {med * 1e3:9.3f} ms   p95 {p95 * 1e3:9.3f} ms   ({len(samples)} calls)")
    return med


def _project(root: Path, settings: dict[str, object]) -> Path:
    (root / ".jido").mkdir(parents=True)
    (root / ".jido" / "settings.json").write_text(json.dumps(settings))
    return root


@contextlib.contextmanager
def _gate(path: Path) -> Iterator[str]:
    """Hold a lock on ``path``: a call running the command yielded runs until the block ends."""
    path.touch()
    fd = os.open(path, os.O_RDONLY)
    fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        yield f"flock {path.name} true"
    finally:
        os.close(fd)


async def _until(cond: Callable[[], bool], timeout: float = 300.0) -> None:
    async def loop() -> None:
        while not cond():  # noqa: ASYNC110  # the runner's state: a bench, not a test
            await asyncio.sleep(0.01)

    await asyncio.wait_for(loop(), timeout)


class Bench:
    def __init__(self, bus: Bus, runner: ToolRunner, a: str, b: str, root_a: Path) -> None:
        self.bus, self.runner, self.a, self.b, self.root_a = bus, runner, a, b, root_a
        self._n = 0

    def _rid(self, prefix: str) -> str:
        self._n += 1
        return f"{prefix}-{self._n}"

    async def read_b(self, timeout: float = 60.0) -> float:
        meta = ToolCallMeta(request_id=self._rid("b"))
        t = time.perf_counter()
        result = await ToolsClient(self.bus, self.b).run(
            "read_file", {"path": "file.txt"}, meta=meta, timeout=timeout
        )
        elapsed = time.perf_counter() - t
        assert result.ok, result
        return elapsed

    async def reads(self, calls: int) -> list[float]:
        return [await self.read_b() for _ in range(calls)]

    def _call_a(self, name: str, args: dict[str, object]) -> asyncio.Task[ToolResult]:
        meta = ToolCallMeta(request_id=self._rid("a"))
        return asyncio.create_task(ToolsClient(self.bus, self.a).run(name, args, meta=meta, timeout=900))

    async def flooded(self, queued: int, measure: Callable[[], object]) -> object:
        """``measure()`` while A runs one blocking call and ``queued`` more wait for A's quota."""
        pipeline = self.runner.pipeline
        assert pipeline is not None
        with _gate(self.root_a / f"gate-{self._n}.lock") as command:
            blocking = self._call_a("bash", {"command": command})
            await _until(lambda: pipeline.quotas.running(f"p:{self.a}") == 1)  # it holds A's quota
            before = self.bus.nc.stats["out_msgs"]
            waiting = [self._call_a("list_dir", {}) for _ in range(queued)]
            await _until(lambda: self.bus.nc.stats["out_msgs"] >= before + queued)
            await self.bus.nc.flush()
            outcome = await measure()  # type: ignore[misc]
        await asyncio.gather(blocking, *waiting, return_exceptions=True)
        return outcome


async def bench(calls: int, queued: int, held: bool, quota_wait: float) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        home = base / "home"
        home.mkdir()
        (home / "settings.json").write_text(json.dumps({"permissions": {"allow": ["Read", "Bash(flock:*)"]}}))
        one_at_a_time = {"tools": {"max_concurrent_per_project": 1, "timeout_s": 900}}
        root_a = _project(base / "a", one_at_a_time)
        root_b = _project(base / "b", {})
        (root_b / "file.txt").write_text(("x" * 79 + "\n") * 51)

        server = NatsServer(store_dir=base / "js").start()
        stop = asyncio.Event()
        try:
            config = Config(nats_url=server.url, jido_home=home, instance="bench")
            engine = asyncio.create_task(serve_engine(config, stop))
            bus = await Bus.connect(config, "bench")
            runner_bus = await Bus.connect(config, "tool_runner")
            runner = ToolRunner(runner_bus, config, quota_wait_s=quota_wait)
            await runner.start()
            pids: list[str] = []
            for root in (root_a, root_b):
                for _ in range(200):
                    try:
                        pids.append((await EngineClient(bus).start_project(str(root))).project_id)
                        break
                    except JidoError:  # the engine may not be up yet
                        await asyncio.sleep(0.05)
            a, b = pids
            run = Bench(bus, runner, a, b, root_a)
            await run.reads(20)  # warm up
            idle = await run.reads(calls)
            pipeline = runner.pipeline
            assert pipeline is not None

            async def measure_flooded() -> list[float]:
                await _until(lambda: pipeline.waiting.waiting(a) >= queued)
                return await run.reads(calls)

            flooded = await run.flooded(queued, measure_flooded)
            assert isinstance(flooded, list)
            first_held: float | None = None
            if held:
                pipeline.waiting.release = contextlib.nullcontext  # the wait keeps the request slot

                async def measure_held() -> float:
                    return await run.read_b(timeout=quota_wait * 4 + 60)

                got = await run.flooded(queued, measure_held)
                assert isinstance(got, float)
                first_held = got
            await runner.stop()
            await runner_bus.close()
            await bus.close()
            stop.set()
            await engine
        finally:
            server.stop()

        print(f"read_file of project B, {calls} sequential calls; project A: quota 1, {queued} calls queued")
        base_med = _stats("A idle", idle)
        flood_med = _stats(f"A running 1 + {queued} queued", flooded)
        print(f"ratio (flooded / idle, medians): {flood_med / base_med:.2f}")
        if first_held is not None:
            print(
                f"{'held slots (before 0306), 1 call':<34} {first_held * 1e3:9.0f} ms   "
                f"({first_held / base_med:.0f}x idle; the quota wait is {quota_wait:g} s)"
            )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--queued", type=int, default=300)
    parser.add_argument("--held", action="store_true", help="also measure the runner before decision 0306")
    parser.add_argument("--quota-wait", type=float, default=30.0)
    opts = parser.parse_args()
    asyncio.run(bench(opts.calls, opts.queued, opts.held, opts.quota_wait))


if __name__ == "__main__":
    main()
