"""MCP server benchmark (issue 15, first figure): a ``tools/call`` of ``read_file`` through
``jidocode mcp`` (stdio) vs the same call through ``jidocode tools run``'s path (``ToolsClient.run``).

    python bench/mcp_server.py [--calls 300] [--size 4096]

Both run against the same system: its own nats-server and the engine, project, asset-loader
and tool-runner services in this process (the tool runner with its policy, quotas and the
``tool.*`` signals).

1. **ToolsClient.run**: a ``RunTool`` request on ``jido.tools.<p>.run`` from this process,
   what ``jidocode tools run`` sends.
2. **MCP over stdio**: the official SDK's ``Client`` spawns ``jidocode mcp <dir>`` and calls
   ``tools/call read_file``; that process maps the call onto the same ``ToolsClient.run``
   (a client without elicitation: no conversation, the same path) and the result onto an
   MCP ``CallToolResult``. Adds the JSON-RPC framing on two pipes, a second process and its
   own NATS connection.

The two kinds of call alternate (after a warm-up of each), so that the machine's load falls
on both alike. Prints the median and p95 latency of each, calls per second, and the ratio of the medians.
(The other figure of the issue, an ``mcp__time__…`` call vs the server directly, is
``bench/mcp_client.py``.)
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from mcp import Client, StdioServerParameters

from jidocode.services.registry import serve_many
from jidocode.shared.bus import Bus
from jidocode.shared.clients import EngineClient, ToolsClient
from jidocode.shared.config import Config
from jidocode.shared.errors import JidoError
from jidocode.shared.events.engine import ProjectInfo
from jidocode.shared.events.tools import ToolCallMeta
from jidocode.shared.natsserver import NatsServer
from jidocode.shared.trust import trust_project

SERVICES = ("engine", "project", "asset_loader", "tool_runner")


def _stats(name: str, samples: list[float]) -> float:
    samples = sorted(samples)
    med = statistics.median(samples)
    p95 = samples[int(len(samples) * 0.95) - 1]
    print(f"{name:<18} median {med * 1e3:8.3f} ms   p95 {p95 * 1e3:8.3f} ms   {1 / med:9.0f} calls/s")
    return med


async def bench(calls: int, size: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "proj"
        (root / ".jido").mkdir(parents=True)
        (root / ".jido" / "settings.json").write_text('{"permissions": {"allow": ["Read"]}}')
        (root / "file.txt").write_text(("x" * 79 + "\n") * (size // 80))
        home = Path(tmp) / "home"
        home.mkdir()
        trust_project(root, home=home)
        os.environ["JIDO_CODE_HOME"] = str(home)
        args = {"path": "file.txt"}
        server = NatsServer(store_dir=Path(tmp) / "js").start()
        stop = asyncio.Event()
        try:
            config = Config(nats_url=server.url, jido_home=home, instance="bench")
            services = asyncio.create_task(serve_many(config, stop, SERVICES))
            bus = await Bus.connect(config, "bench")
            info: ProjectInfo | None = None
            for _ in range(400):
                try:
                    info = await EngineClient(bus).start_project(str(root))
                    break
                except JidoError:  # the engine may not be up yet
                    await asyncio.sleep(0.05)
            assert info is not None
            tools = ToolsClient(bus, info.project_id, timeout=30)

            async def direct(i: int) -> float:
                meta = ToolCallMeta(request_id=f"bench-{i}")
                t = time.perf_counter()
                result = await tools.run("read_file", args, meta=meta)
                elapsed = time.perf_counter() - t
                assert result.ok, result
                return elapsed

            params = StdioServerParameters(
                command=sys.executable,
                args=["-m", "jidocode.cli.main", "mcp", str(root)],
                env={**os.environ, "NATS_URL": server.url},
            )
            async with Client(params, read_timeout_seconds=60) as client:

                async def over_mcp() -> float:
                    t = time.perf_counter()
                    result = await client.call_tool("read_file", args)
                    elapsed = time.perf_counter() - t
                    assert result.is_error is False, result
                    return elapsed

                for i in range(20):
                    await direct(-1 - i)
                    await over_mcp()
                # interleaved, so that a change in the machine's load falls on both alike
                through_client: list[float] = []
                through_mcp: list[float] = []
                for i in range(calls):
                    through_client.append(await direct(i))
                    through_mcp.append(await over_mcp())
            await bus.close()
            stop.set()
            await services
        finally:
            server.stop()

        print(f"read_file of a {size}-byte file, {calls} sequential calls each")
        base = _stats("ToolsClient.run", through_client)
        mcp = _stats("MCP tools/call", through_mcp)
        print(f"ratio (MCP over stdio / ToolsClient.run, medians): {mcp / base:.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--size", type=int, default=4096)
    opts = parser.parse_args()
    asyncio.run(bench(opts.calls, opts.size))


if __name__ == "__main__":
    main()
