"""How fast a stop ends a running call's whole process tree, under each sandbox.

    python bench/sandbox_stop.py [--runs 5] [--modes bubblewrap,landlock]

A nats-server and the engine, project service and tool runner run here; each run starts
``jidocode tools run <project> bash`` (a process of its own, as a user runs it) whose command
leaves a ``setsid`` daemon, a double-forked session leader and a ``nohup`` child behind a
foreground ``sleep``, then stops it — by ``project stop`` (the engine's command, as
``jidocode projects stop`` sends it) or by a ``cancel`` of the call (as a conversation sends it).
Prints, per mode and way, the median and worst time from the stop request until every process of
the call is gone (the command's tree and bubblewrap or the Landlock launcher), until the waiting
CLI printed the call's result, and until it exited. A mode this machine cannot run is skipped with its reason.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

# Run as a script, this file's folder comes first on sys.path and bench/mcp.py would shadow the MCP SDK.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]

from jidocode.services.registry import serve_many  # noqa: E402
from jidocode.shared import sandbox  # noqa: E402
from jidocode.shared.bus import Bus  # noqa: E402
from jidocode.shared.clients import EngineClient, ToolsClient  # noqa: E402
from jidocode.shared.config import Config  # noqa: E402
from jidocode.shared.natsserver import NatsServer  # noqa: E402
from jidocode.shared.trust import trust_project  # noqa: E402

SERVICES = ("engine", "project", "tool_runner")
PATIENCE_S = 60.0


def _tree(marker: str) -> str:
    return "\n".join(
        [
            f"setsid -f sleep {marker}",
            f"( setsid sleep {marker} & )",
            f"nohup sleep {marker} >/dev/null 2>&1 &",
            f"exec sleep {marker}",
        ]
    )


def _holding(marker: str) -> list[tuple[int, str]]:
    """Live processes whose command line holds ``marker``, with their ``comm``."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        if marker.encode() in cmdline and stat.rsplit(")", 1)[-1].split()[0] != "Z":
            found.append((int(entry), stat.split("(", 1)[1].rsplit(")", 1)[0]))
    return found


async def _until(condition: Callable[[], bool]) -> float:
    """Poll ``condition`` (``/proc`` has no change notification); the monotonic time it held."""
    deadline = time.monotonic() + PATIENCE_S
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError("still running after the patience")
        await asyncio.sleep(0.002)
    return time.monotonic()


async def _one(
    config: Config, bus: Bus, root: Path, marker: str, stop: Callable[[str, str], Awaitable[object]]
) -> tuple[float, float, float]:
    env = {**os.environ, "NATS_URL": config.nats_url, "JIDO_CODE_HOME": str(config.jido_home)}
    request_id = f"bench-{marker}"
    args = json.dumps({"command": _tree(marker)})
    cli = await asyncio.create_subprocess_exec(
        str(Path(sys.executable).parent / "jidocode"),
        *("tools", "run", str(root), "bash", "--args", args, "--request-id", request_id),
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
    )
    assert cli.stdout is not None
    await _until(lambda: sum(comm == "sleep" for _, comm in _holding(marker)) == 4)
    project_id = (await EngineClient(bus).start_project(str(root))).project_id
    t0 = time.monotonic()
    await stop(project_id, request_id)
    tree_gone = await _until(lambda: all(pid == cli.pid for pid, _ in _holding(marker)))
    await asyncio.wait_for(cli.stdout.read(1), PATIENCE_S)  # the CLI prints the call's result
    printed = time.monotonic()
    await asyncio.wait_for(cli.communicate(), PATIENCE_S)
    exited = time.monotonic()
    await EngineClient(bus).start_project(str(root))  # running again for the next run
    return tree_gone - t0, printed - t0, exited - t0


async def _bench(config: Config, root: Path, runs: int) -> dict[str, list[tuple[float, float, float]]]:
    done = asyncio.Event()
    services = asyncio.create_task(serve_many(config, done, SERVICES))
    bus = await Bus.connect(config, "bench")
    try:
        await EngineClient(bus).start_project(str(root), timeout=30)

        async def project_stop(project_id: str, request_id: str) -> object:
            return await EngineClient(bus).stop_project(project_id)

        async def cancel(project_id: str, request_id: str) -> object:
            return await ToolsClient(bus, project_id).cancel(request_id)

        out: dict[str, list[tuple[float, float, float]]] = {}
        for name, stop in (("project stop", project_stop), ("cancel", cancel)):
            out[name] = [
                await _one(config, bus, root, f"77.{os.getpid()}{len(out)}{i}1", stop) for i in range(runs)
            ]
        return out
    finally:
        await bus.close()
        done.set()
        await asyncio.wait_for(services, 30)


def _ms(values: list[float]) -> str:
    return f"{statistics.median(values) * 1000:.0f} ms (worst {max(values) * 1000:.0f})"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--modes", default="bubblewrap,landlock")
    args = parser.parse_args()
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    caps = sandbox.detect()
    print(f"load average {os.getloadavg()[0]:.2f}; {args.runs} runs each")
    for mode in args.modes.split(","):
        if mode == "bubblewrap" and not caps.bwrap:
            print(f"{mode}: skipped ({caps.bwrap_problem})")
            continue
        if mode == "landlock" and not caps.landlock_abi:
            print(f"{mode}: skipped ({caps.landlock_problem})")
            continue
        with tempfile.TemporaryDirectory(prefix="bench-stop-") as tmp:
            home = Path(tmp) / "jido_home"
            home.mkdir()
            (home / "settings.json").write_text(json.dumps({"sandbox": {"mode": mode}}))
            os.environ["JIDO_CODE_HOME"] = str(home)
            root = Path(tmp) / "project"
            (root / ".jido").mkdir(parents=True)
            (root / ".jido" / "settings.json").write_text(json.dumps({"permissions": {"allow": ["Bash"]}}))
            subprocess.run(["git", "init", "-q", str(root)], check=True)
            trust_project(root, home=home)
            server = NatsServer(store_dir=Path(tmp) / "js", sync="default").start()
            try:
                config = Config(nats_url=server.url, jido_home=home, instance="bench")
                results = asyncio.run(_bench(config, root, args.runs))
            finally:
                server.stop()
        for name, times in results.items():
            tree, printed, exited = (list(column) for column in zip(*times, strict=True))
            print(
                f"{mode}: {name}: tree gone {_ms(tree)}; CLI printed the result {_ms(printed)}, "
                f"exited {_ms(exited)}"
            )


if __name__ == "__main__":
    main()
