"""Request/reply through our envelope and bus client vs raw nats-py, in the same run.

    python bench/bus.py [--rounds 10] [--per-round 300] [--loop asyncio|uvloop|both]

Starts its own nats-server (loopback, temporary store). Our side is a typed
call (``Bus.call`` with a ``StartProject`` command, answered by a
``ServiceHost.endpoint`` whose handler returns the ``ProjectInfo`` the command
declares). The raw baseline sends exactly the bytes our client sends and
answers with exactly the bytes our service answers, so the difference is what
our codec, validation, nats.micro host and typed-error handling cost. Rounds
alternate between the two to share the machine's noise. Prints medians, p99s
and the ratio (goal: ≤ 1.3). ``--loop`` runs both sides on the standard
asyncio loop, on uvloop, or both one after the other (the default).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import tempfile
import time
from pathlib import Path

import nats

from jidocode.shared.bus import Bus
from jidocode.shared.config import Config
from jidocode.shared.envelope import Envelope, encode
from jidocode.shared.events.engine import ProjectInfo, StartProject
from jidocode.shared.natsserver import NatsServer
from jidocode.shared.service import ServiceHost

SUBJECT_OURS = "bench.ours"
SUBJECT_RAW = "bench.raw"


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def main(rounds: int, per_round: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        server = NatsServer(store_dir=Path(tmp), sync="default").start()
        try:
            config = Config(nats_url=server.url, instance="bench")
            service_bus = await Bus.connect(config, "engine")
            client = await Bus.connect(config, "bench")
            raw_server = await nats.connect(server.url)
            raw_client = await nats.connect(server.url)

            request_event = StartProject(root_path="/srv/projects/example", opts={"note": "x" * 64})
            result = ProjectInfo(
                project_id="01jbench0000000000000000000",
                root_path="/srv/projects/example",
                started_at="2026-01-01T00:00:00.000000Z",
            )

            async def handler(cmd: StartProject, env: Envelope) -> ProjectInfo:
                return result  # the host has validated the request as a StartProject

            host = ServiceHost(service_bus, name="engine")
            host.endpoint(StartProject, SUBJECT_OURS, handler, name="bench")
            await host.start()

            sample_request = encode(client.envelope(request_event))[0]
            # what our endpoint answers, byte for byte, is what the raw responder answers
            sample_reply = (await raw_client.request(SUBJECT_OURS, sample_request, timeout=5)).data

            async def raw_responder(msg: nats.aio.msg.Msg) -> None:
                await msg.respond(sample_reply)

            await raw_server.subscribe(SUBJECT_RAW, queue="q", cb=raw_responder)
            await raw_server.flush()

            async def ours_once() -> float:
                t0 = time.perf_counter()
                reply = await client.call(SUBJECT_OURS, request_event)
                elapsed = time.perf_counter() - t0
                assert reply.project_id == result.project_id  # a typed ProjectInfo came back
                return elapsed

            async def raw_once() -> float:
                t0 = time.perf_counter()
                await raw_client.request(SUBJECT_RAW, sample_request, timeout=5)
                return time.perf_counter() - t0

            for _ in range(200):  # warm up both paths
                await ours_once()
                await raw_once()
            ours: list[float] = []
            raw: list[float] = []
            for r in range(rounds):
                first, second = (ours_once, raw_once) if r % 2 == 0 else (raw_once, ours_once)
                for fn in (first, second):
                    bucket = ours if fn is ours_once else raw
                    for _ in range(per_round):
                        bucket.append(await fn())
            m_ours, m_raw = statistics.median(ours), statistics.median(raw)
            p_ours, p_raw = pct(ours, 0.99), pct(raw, 0.99)
            print(
                f"payload: request {len(sample_request)} B, reply {len(sample_reply)} B; {len(ours)} requests each"
            )
            print(f"raw nats-py request/reply : median {m_raw * 1e6:8.1f} µs   p99 {p_raw * 1e6:8.1f} µs")
            print(f"jidocode bus + envelope   : median {m_ours * 1e6:8.1f} µs   p99 {p_ours * 1e6:8.1f} µs")
            print(f"ratio (median)            : {m_ours / m_raw:.3f}   (goal ≤ 1.3)")
            print(f"ratio (p99)               : {p_ours / p_raw:.3f}")
            await host.stop()
            for c in (raw_client, raw_server):
                await c.close()
            await client.close()
            await service_bus.close()
        finally:
            server.stop()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--per-round", type=int, default=300)
    parser.add_argument("--loop", choices=("asyncio", "uvloop", "both"), default="both")
    args = parser.parse_args()
    print(f"load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())} ({os.cpu_count()} cores)")
    for loop in ("asyncio", "uvloop") if args.loop == "both" else (args.loop,):
        print(f"--- event loop: {loop}")
        if loop == "uvloop":
            import uvloop

            uvloop.run(main(args.rounds, args.per_round))
        else:
            asyncio.run(main(args.rounds, args.per_round))
