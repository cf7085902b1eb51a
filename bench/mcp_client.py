"""MCP client benchmark (issue 15): ``mcp__time__get_current_time`` through JidoCode vs the SDK directly.

    python bench/mcp_client.py [--calls 300]

1. **Direct**: the official SDK's ``Client`` on ``python -m mcp_server_time`` over stdio,
   ``call_tool("get_current_time", {"timezone": "UTC"})`` in a loop (no sandbox, no bus).
2. **Through JidoCode**: ``ToolsClient.run("mcp__time__get_current_time", …)`` — a ``RunTool``
   request on ``jido.tools.<p>.run`` to the tool runner (with the engine) on its own
   nats-server: the CloudEvent codec, the NATS round trip, the project's policy (an allow rule
   ``mcp__time``), the tool.* signals, the idempotency claim in KV, then the same SDK call on
   the runner's connection to the same server, started in the OS sandbox this machine gives.

Both servers are started and warmed up before the timed calls; the figure is the per-call cost.
Prints the median and p95 of each and the ratio of the medians.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

from mcp import Client
from mcp.client.stdio import StdioServerParameters

from jidocode.services.engine.service import serve as serve_engine
from jidocode.services.tool_runner.service import ToolRunner
from jidocode.shared.bus import Bus
from jidocode.shared.clients import EngineClient, ToolsClient
from jidocode.shared.config import Config
from jidocode.shared.errors import JidoError
from jidocode.shared.events.engine import ProjectInfo
from jidocode.shared.events.tools import ToolCallMeta
from jidocode.shared.natsserver import NatsServer

ARGS = {"timezone": "UTC"}


def _stats(name: str, samples: list[float]) -> float:
    samples = sorted(samples)
    med = statistics.median(samples)
    p95 = samples[int(len(samples) * 0.95) - 1]
    print(f"{name:<16} median {med * 1e3:8.3f} ms   p95 {p95 * 1e3:8.3f} ms   {1 / med:8.0f} calls/s")
    return med


def _sandbox_python() -> tuple[str, dict[str, str]]:
    """A Python the sandbox can run (it hides the home) and where it finds mcp_server_time."""
    home = os.path.realpath(os.path.expanduser("~"))
    exe = os.path.realpath(sys.executable)
    if exe.startswith(home + os.sep):
        exe = f"/usr/bin/python{sys.version_info.major}.{sys.version_info.minor}"
    return exe, {"PYTHONPATH": sysconfig.get_paths()["purelib"]}


async def direct(calls: int) -> list[float]:
    params = StdioServerParameters(command=sys.executable, args=["-m", "mcp_server_time"])
    async with Client(params) as client:
        for _ in range(20):
            await client.call_tool("get_current_time", ARGS)
        out = []
        for _ in range(calls):
            t = time.perf_counter()
            result = await client.call_tool("get_current_time", ARGS)
            out.append(time.perf_counter() - t)
            assert not result.is_error, result
        return out


async def through_jidocode(calls: int, tmp: Path) -> tuple[list[float], str]:
    root, home = tmp / "proj", tmp / "home"
    root.mkdir()
    home.mkdir()
    exe, env = _sandbox_python()
    server = {"command": exe, "args": ["-m", "mcp_server_time"], "env": env}
    (home / ".mcp.json").write_text(json.dumps({"mcpServers": {"time": server}}))
    (home / "settings.json").write_text(json.dumps({"permissions": {"allow": ["mcp__time"]}}))
    nats = NatsServer(store_dir=tmp / "js").start()
    stop = asyncio.Event()
    try:
        config = Config(nats_url=nats.url, jido_home=home, instance="bench")
        engine = asyncio.create_task(serve_engine(config, stop))
        bus = await Bus.connect(config, "bench")
        runner_bus = await Bus.connect(config, "tool_runner")
        runner = ToolRunner(runner_bus, config)
        await runner.start()
        info: ProjectInfo | None = None
        for _ in range(200):
            try:
                info = await EngineClient(bus).start_project(str(root))
                break
            except JidoError:  # the engine may not be up yet
                await asyncio.sleep(0.05)
        assert info is not None
        tools = ToolsClient(bus, info.project_id, timeout=60)

        async def one(i: int) -> float:
            meta = ToolCallMeta(request_id=f"bench-{i}")
            t = time.perf_counter()
            result = await tools.run("mcp__time__get_current_time", ARGS, meta=meta)
            elapsed = time.perf_counter() - t
            assert result.ok, result
            return elapsed

        for i in range(20):  # the first starts the server
            await one(-1 - i)
        samples = [await one(i) for i in range(calls)]
        servers = await tools.mcp_servers()
        await runner.stop()
        await runner_bus.close()
        await bus.close()
        stop.set()
        await engine
    finally:
        nats.stop()
    return samples, servers.servers[0].state


async def bench(calls: int) -> None:
    direct_samples = await direct(calls)
    with tempfile.TemporaryDirectory() as tmp:
        ours, state = await through_jidocode(calls, Path(tmp))
    print(f"mcp__time__get_current_time {ARGS}, {calls} sequential calls each (server {state})")
    dm = _stats("SDK direct", direct_samples)
    om = _stats("through JidoCode", ours)
    print(f"ratio (JidoCode / direct, medians): {om / dm:.2f}x  (+{(om - dm) * 1e3:.2f} ms per call)")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--calls", type=int, default=300)
    opts = parser.parse_args()
    asyncio.run(bench(opts.calls))


if __name__ == "__main__":
    main()
