"""`jidocode doctor`'s disk line: free space on the data home's disk and what the streams use."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import nats
from nats.js.api import StreamConfig

from jidocode.cli.doctor import check_disk
from jidocode.shared.natsserver import NatsServer
from jidocode.shared.store_space import MIB, stream_budget
from tests.small_disk import fill, small_disk


async def test_the_disk_line_shows_free_space_and_stream_use_and_warns_when_nearly_full(
    tmp_path: Path,
) -> None:
    with small_disk(tmp_path / "data", "256m") as data:
        store = data / "nats"
        store.mkdir()
        budget = stream_budget(store)
        server = await asyncio.to_thread(NatsServer(store_dir=store, sync="default").start)
        try:
            nc = await nats.connect(server.url)
            js = nc.jetstream()
            await js.add_stream(
                StreamConfig(name="JIDO_EVENTS", subjects=["e.>"], max_bytes=budget.sizes["events"])
            )
            for _ in range(20):
                await js.publish("e.x", b"x" * 50_000)
            await nc.close()
        finally:
            await asyncio.to_thread(server.stop)

        line = check_disk(data)
        assert line["name"] == "disk" and line["status"] == "warn"  # 256 MiB: under the 1 GiB warning
        assert f"{data}:" in line["detail"] and "free of 256 MiB" in line["detail"]
        events = budget.sizes["events"] // MIB
        assert f"JIDO_EVENTS 1 MiB of {events} MiB" in line["detail"], line["detail"]

        fill(data, leave=1 * MIB)
        env = {**os.environ, "JIDO_DATA_HOME": str(data), "JIDO_CODE_HOME": str(tmp_path / "home")}
        env.pop("NATS_URL", None)
        argv = [sys.executable, "-m", "jidocode.cli.main", "doctor", "--json", "--no-check"]
        done = await asyncio.to_thread(
            subprocess.run, argv, env=env, capture_output=True, text=True, timeout=120
        )
        checks = {c["name"]: c for c in json.loads(done.stdout)["checks"]}
        assert checks["disk"]["status"] == "warn" and "1 MiB free of 256 MiB" in checks["disk"]["detail"]
        assert "a full disk stops every JetStream write" in checks["disk"]["fix"]
