"""What following a PRD costs a client: events per second through the follower, and the time to
resume near the end of a long PRD (decision 0290: the follower finds the resume point in the
stream by a binary search, then reads a few events early and skips them).

    python bench/prd_follow.py [--events 10000] [--other 10000]

An embedded nats-server with a ``JIDO_PRD`` stream; ``--events`` loop events of one PRD
(assistant text of 80 characters, like a streamed answer), interleaved with ``--other``
events of another PRD of the project; then, each timed separately:

- the whole PRD from seq 0 through :class:`PrdFollower` (decoded into catalogue events);
- the last 10 events (``after_seq = events - 10``): what ``jidocode prd show`` and a
  resumed follower pay;
- the lines :class:`LineRenderer` makes of all of them (the terminal's share, without I/O).
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from pathlib import Path

from nats.js.api import StreamConfig

from jidocode.cli.prd_follow import PrdFollower
from jidocode.cli.prd_render import LineRenderer
from jidocode.shared import subjects
from jidocode.shared.bus import Bus
from jidocode.shared.config import Config
from jidocode.shared.events.prd import PrdAssistantText, PrdEvent
from jidocode.shared.natsserver import NatsServer

TEXT = "x" * 79 + "\n"


async def _publish(bus: Bus, events: int, other: int) -> None:
    pending = []
    for seq in range(1, max(events, other) + 1):
        for prd, count in (("bench", events), ("other", other)):
            if seq <= count:
                event = PrdAssistantText(project_id="p1", prd=prd, seq=seq, text=TEXT)
                pending.append(bus.js_publish(subjects.prd_event("p1", prd, event.type), event))
        if len(pending) >= 256:
            await asyncio.gather(*pending)
            pending.clear()
    await asyncio.gather(*pending)


async def _read(bus: Bus, after: int, until: int) -> tuple[float, list[PrdEvent]]:
    got: list[PrdEvent] = []
    start = time.perf_counter()
    async with PrdFollower(bus, "p1", "bench", after_seq=after) as follower:
        while follower.last_seq < until:
            event = await follower.next()
            if event is not None:
                got.append(event)
    return time.perf_counter() - start, got


async def main(events: int, other: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        server = NatsServer(store_dir=Path(tmp) / "js", sync="default").start()
        try:
            bus = await Bus.connect(
                Config(nats_url=server.url, jido_home=Path(tmp), instance="bench"), "bench"
            )
            await bus.js.add_stream(
                StreamConfig(name=subjects.STREAM_PRD, subjects=[subjects.prd_event_filter()])
            )
            await _publish(bus, events, other)
            whole_s, got = await _read(bus, 0, events)
            tail_s, tail = await _read(bus, events - 10, events)
            renderer = LineRenderer()
            start = time.perf_counter()
            lines = sum(len(renderer.feed(e)) for e in got)
            render_s = time.perf_counter() - start
            await bus.close()
        finally:
            server.stop()
    assert len(got) == events and [e.seq for e in got] == list(range(1, events + 1)) and len(tail) == 10
    print(f"stream: {events} events of the PRD + {other} of another PRD")
    print(f"follow all {events}: {whole_s:.2f} s ({events / whole_s:,.0f} events/s)")
    print(f"resume for the last 10 (after_seq={events - 10}): {tail_s * 1000:.0f} ms")
    print(
        f"render {events} events into {lines} lines: {render_s * 1000:.0f} ms ({events / render_s:,.0f} events/s)"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--events", type=int, default=10_000)
    parser.add_argument("--other", type=int, default=10_000)
    args = parser.parse_args()
    asyncio.run(main(args.events, args.other))
