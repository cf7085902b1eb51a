"""Tool-runner benchmark (issues 4, 11 and 27): ``read_file`` through the bus vs in-process, the
messages of one call, and the cost of the OS sandbox: ``bash echo`` through the bus, sandboxed
vs unsandboxed.

    python bench/tools.py [--calls 500] [--size 4096] [--bash-calls 200]

1. **In-process**: ``executor.execute(policy, "read_file", …)`` — validation,
   authorization (realpath, rules), the dir-fd ``O_NOFOLLOW`` open, the result.
2. **Through the bus**: ``ToolsClient.run`` (a ``RunTool`` request on
   ``jido.tools.<p>.run``) to the tool-runner service (with the engine) on
   its own nats-server — adds the CloudEvent codec, NATS round trip, the
   project lookup in KV, the project's quota lease in the KV bucket
   ``jido_tool_quotas`` and the tool.* signals (read_file is read-only: no
   idempotency claim in KV).
3. **Through the bus, in a conversation** (``meta.conversation_id``, as the
   conversation service sends a model's calls): the conversation's quota lease
   too (decision 0349: both leases are taken at once, and freed after the answer).
   For 2 and 3, the NATS messages the server routes for one call, by kind.
4. **bash through the bus**, ``echo hi`` under each ``sandbox.mode`` this
   machine can run (set in the user's global settings, read by the runner at
   each call): ``off`` (no sandbox, the baseline), ``landlock`` (the launcher,
   a Python interpreter with ``-I -S``, plus the ruleset) and ``bubblewrap``
   (namespaces, mounts, the protected-path snapshot). A bash call also claims
   its request id in KV (idempotency), which the read does not.

Prints the median and p95 latency of each, calls per second, and the ratios.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import nats
from nats.aio.msg import Msg

from jidocode.services.engine.service import serve as serve_engine
from jidocode.services.tool_runner.executor import execute
from jidocode.services.tool_runner.service import ToolRunner
from jidocode.shared.bus import Bus
from jidocode.shared.clients import EngineClient, ToolsClient
from jidocode.shared.config import Config
from jidocode.shared.errors import JidoError
from jidocode.shared.events.engine import ProjectInfo
from jidocode.shared.events.tools import ToolCallMeta
from jidocode.shared.natsserver import NatsServer
from jidocode.shared.policy import Policy
from jidocode.shared.sandbox import detect

#: How many calls the message count covers (their messages are divided by it).
COUNTED_CALLS = 20


def _stats(name: str, samples: list[float]) -> float:
    samples = sorted(samples)
    med = statistics.median(samples)
    p95 = samples[int(len(samples) * 0.95) - 1]
    print(f"{name:<14} median {med * 1e3:8.3f} ms   p95 {p95 * 1e3:8.3f} ms   {1 / med:9.0f} calls/s")
    return med


def _modes() -> list[str]:
    caps = detect()
    return ["off"] + (["landlock"] if caps.landlock_abi else []) + (["bubblewrap"] if caps.bwrap else [])


def _global_settings(home: Path, mode: str) -> None:
    """The user's global layer (a project's own allow rules count only once it is trusted)."""
    settings = {"permissions": {"allow": ["Read", "Bash(echo:*)"]}, "sandbox": {"mode": mode}}
    (home / "settings.json").write_text(json.dumps(settings))


async def _in_process(policy: Policy, args: dict[str, Any], calls: int) -> list[float]:
    for _ in range(20):
        await execute(policy, "read_file", args)
    local: list[float] = []
    for _ in range(calls):
        t = time.perf_counter()
        result = await execute(policy, "read_file", args)
        local.append(time.perf_counter() - t)
        assert result.ok
    return local


async def _reads(
    tools: ToolsClient, args: dict[str, Any], calls: int, conversation: str | None
) -> list[float]:
    """``calls`` sequential ``read_file`` calls through the bus (of ``conversation``: two quota slots)."""

    async def one(i: int) -> float:
        meta = ToolCallMeta(request_id=f"read-{conversation}-{i}", conversation_id=conversation)
        t = time.perf_counter()
        result = await tools.run("read_file", args, meta=meta)
        elapsed = time.perf_counter() - t
        assert result.ok, result
        return elapsed

    for i in range(20):
        await one(-1 - i)
    return [await one(i) for i in range(calls)]


def _kind(subject: str) -> str:
    """A subject without its ids (``$KV.<bucket>``, ``jido.tools.<p>.run``, ``_INBOX``)."""
    tokens = subject.split(".")
    if tokens[0].startswith("_INBOX"):
        return "_INBOX (replies)"
    if tokens[0] == "$KV":
        return ".".join(tokens[:2])
    if tokens[:2] == ["jido", "tools"]:
        return f"jido.tools.<p>.{tokens[-1]}"
    return subject


async def _messages(
    url: str, tools: ToolsClient, args: dict[str, Any], conversation: str | None
) -> Counter[str]:
    """The NATS messages the server routes per ``read_file`` call, by kind (over :data:`COUNTED_CALLS`)."""
    counter = await nats.connect(url)
    kinds: Counter[str] = Counter()

    async def count(msg: Msg) -> None:
        kinds[_kind(msg.subject)] += 1

    try:
        sub = await counter.subscribe(">", cb=count)
        await counter.flush()
        for i in range(COUNTED_CALLS):
            meta = ToolCallMeta(request_id=f"count-{conversation}-{i}", conversation_id=conversation)
            assert (await tools.run("read_file", args, meta=meta)).ok
        await asyncio.sleep(0.5)  # a settle time, not a synchronization: the last call's frees
        await counter.flush()
        await sub.unsubscribe()
    finally:
        await counter.close()
    return kinds


async def _bash_modes(tools: ToolsClient, home: Path, bash_calls: int) -> dict[str, list[float]]:
    """``bash echo hi`` through the bus, ``bash_calls`` times under each sandbox mode."""

    async def bash(mode: str, i: int) -> float:
        meta = ToolCallMeta(request_id=f"bash-{mode}-{i}")
        t = time.perf_counter()
        result = await tools.run("bash", {"command": "echo hi"}, meta=meta)
        elapsed = time.perf_counter() - t
        assert result.ok and result.data["sandbox"] == mode, result
        return elapsed

    per_mode: dict[str, list[float]] = {}
    for mode in _modes():
        _global_settings(home, mode)
        for i in range(10):
            await bash(mode, -1 - i)
        per_mode[mode] = [await bash(mode, i) for i in range(bash_calls)]
    return per_mode


async def _start_project(bus: Bus, root: Path) -> ProjectInfo:
    for _ in range(200):
        try:
            return await EngineClient(bus).start_project(str(root))
        except JidoError:  # the engine may not be up yet
            await asyncio.sleep(0.05)
    raise RuntimeError("the engine did not start the project in 10 s")


async def _through_the_bus(
    tmp: Path, root: Path, home: Path, args: dict[str, Any], calls: int, bash_calls: int
) -> tuple[dict[str, list[float]], dict[str, Counter[str]], dict[str, list[float]]]:
    """The bus runs on a nats-server of their own: read latencies and messages (without and in a
    conversation), then bash per sandbox mode."""
    server = NatsServer(store_dir=tmp / "js").start()
    stop = asyncio.Event()
    try:
        config = Config(nats_url=server.url, jido_home=home, instance="bench")
        engine = asyncio.create_task(serve_engine(config, stop))
        bus = await Bus.connect(config, "bench")
        runner_bus = await Bus.connect(config, "tool_runner")
        runner = ToolRunner(runner_bus, config)
        await runner.start()
        info = await _start_project(bus, root)
        tools = ToolsClient(bus, info.project_id, timeout=10)
        variants = {"bus + runner": None, "in a conv.": "bench-conversation"}
        reads = {name: await _reads(tools, args, calls, conv) for name, conv in variants.items()}
        messages = {name: await _messages(server.url, tools, args, conv) for name, conv in variants.items()}
        per_mode = await _bash_modes(tools, home, bash_calls)
        await runner.stop()
        await runner_bus.close()
        await bus.close()
        stop.set()
        await engine
    finally:
        server.stop()
    return reads, messages, per_mode


def _report(
    size: int,
    calls: int,
    local: list[float],
    reads: dict[str, list[float]],
    messages: dict[str, Counter[str]],
    per_mode: dict[str, list[float]],
    bash_calls: int,
) -> None:
    print(f"read_file of a {size}-byte file, {calls} sequential calls each")
    lm = _stats("in-process", local)
    for name, samples in reads.items():
        rm = _stats(name, samples)
        print(f"{'':<14} ratio (bus / in-process, medians): {rm / lm:.1f}x")
    for name, kinds in messages.items():
        per_call = sum(kinds.values()) / COUNTED_CALLS
        print(f"\nNATS messages per read_file call, {name}: {per_call:.1f}")
        for kind, n in kinds.most_common():
            print(f"  {n / COUNTED_CALLS:5.1f}  {kind}")
    print(f"\nbash 'echo hi' through the bus, {bash_calls} sequential calls per sandbox mode")
    base = _stats("off", per_mode["off"])
    for mode, samples in per_mode.items():
        if mode != "off":
            med = _stats(mode, samples)
            print(f"{'':<14} sandbox cost: +{(med - base) * 1e3:.1f} ms per call ({med / base:.1f}x)")


async def bench(calls: int, size: int, bash_calls: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "proj"
        (root / ".jido").mkdir(parents=True)
        (root / "file.txt").write_text(("x" * 79 + "\n") * (size // 80))
        home = Path(tmp) / "home"
        home.mkdir()
        _global_settings(home, "off")
        args = {"path": "file.txt"}
        policy = Policy.build(str(root), allow=["Read"], jido_home=str(home))
        local = await _in_process(policy, args, calls)
        reads, messages, per_mode = await _through_the_bus(Path(tmp), root, home, args, calls, bash_calls)
    _report(size, calls, local, reads, messages, per_mode, bash_calls)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--calls", type=int, default=500)
    parser.add_argument("--size", type=int, default=4096)
    parser.add_argument("--bash-calls", type=int, default=200)
    opts = parser.parse_args()
    asyncio.run(bench(opts.calls, opts.size, opts.bash_calls))


if __name__ == "__main__":
    main()
