"""CLI start-up benchmark (issue 25, point 4): how long a command takes before it does its work.

    python bench/cli.py [--runs 5] [--no-mcp]

Each figure is the median wall-clock time of ``--runs`` fresh processes, measured in rounds
that interleave the baselines with the commands, so that a change in the machine's load falls
on all of them alike:

* baselines: ``python -c pass`` (the interpreter) and ``python -c "import typer"`` (the CLI
  framework every command needs);
* ``import jidocode.cli.main``, ``jidocode --help`` and, per command, ``jidocode <command>
  --help``: a command's own start (its module and everything it imports, up to where it
  would begin its work);
* ``jidocode mcp <dir>`` until it answers ``initialize`` on stdout, against a running system
  (its own nats-server and the engine, project, asset-loader and tool-runner services in this
  process): the first time (the project is started by the command) and once it runs.

Prints each median, its ratio to both baselines, and the goal (0.3 s for a command on an
idle machine, 1.5 s for ``initialize``).
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
from collections.abc import Callable
from pathlib import Path

# Run as a script, this file's folder comes first on sys.path and bench/mcp.py would shadow the SDK.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]

from jidocode.cli.main import COMMANDS  # noqa: E402

PYTHON = sys.executable
CLI = [PYTHON, "-m", "jidocode.cli.main"]
#: What ``jidocode mcp`` needs running to answer (bench/mcp.py runs the same).
MCP_SERVICES = ("engine", "project", "asset_loader", "tool_runner")
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "bench", "version": "1"},
    },
}


def _timed(argv: list[str]) -> float:
    """Seconds one process ``argv`` takes to exit (its output discarded; it must exit 0)."""
    start = time.perf_counter()
    subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    return time.perf_counter() - start


def _cases() -> dict[str, list[str]]:
    cases = {
        "python -c pass": [PYTHON, "-c", "pass"],
        'python -c "import typer"': [PYTHON, "-c", "import typer"],
        "import jidocode.cli.main": [PYTHON, "-c", "import jidocode.cli.main"],
        "jidocode --help": [*CLI, "--help"],
    }
    for entry in COMMANDS:
        if entry.available():
            cases[f"jidocode {entry.name} --help"] = [*CLI, entry.name, "--help"]
    return cases


def _medians(cases: dict[str, list[str]], runs: int) -> dict[str, float]:
    samples: dict[str, list[float]] = {name: [] for name in cases}
    for argv in cases.values():  # a warm-up round: the page cache, .pyc files
        _timed(argv)
    for _ in range(runs):
        for name, argv in cases.items():
            samples[name].append(_timed(argv))
    return {name: statistics.median(values) for name, values in samples.items()}


def _row(name: str, seconds: float, base: float, typer_base: float, goal: float | None) -> str:
    goal_text = f"   goal {goal:.1f} s" if goal is not None else ""
    return (
        f"{name:<36} {seconds * 1e3:8.0f} ms   x{seconds / base:6.1f} pass   "
        f"x{seconds / typer_base:5.2f} typer{goal_text}"
    )


async def _initialize_once(root: Path, env: dict[str, str]) -> float:
    """Seconds from spawning ``jidocode mcp <root>`` to its answer to ``initialize``."""
    start = time.perf_counter()
    proc = await asyncio.create_subprocess_exec(
        *CLI, "mcp", str(root), stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, env=env
    )
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(json.dumps(INITIALIZE).encode() + b"\n")
    await proc.stdin.drain()
    line = await asyncio.wait_for(proc.stdout.readline(), 120)
    elapsed = time.perf_counter() - start
    answer = json.loads(line)
    if "result" not in answer:
        raise RuntimeError(f"initialize failed: {answer}")
    proc.stdin.close()
    await proc.wait()
    return elapsed


async def _mcp_initialize(runs: int, measure_baseline: Callable[[], float]) -> tuple[float, float, float]:
    """(first answer with the project not started, median once it runs, median baseline)."""
    from jidocode.services.registry import serve_many
    from jidocode.shared.config import Config
    from jidocode.shared.natsserver import NatsServer
    from jidocode.shared.trust import trust_project

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "proj"
        root.mkdir()
        (root / "README.md").write_text("# a project\n")
        home = Path(tmp) / "home"
        home.mkdir()
        trust_project(root, home=home)
        os.environ["JIDO_CODE_HOME"] = str(home)
        server = NatsServer(store_dir=Path(tmp) / "js").start()
        stop = asyncio.Event()
        try:
            config = Config(nats_url=server.url, jido_home=home, instance="bench")
            services = asyncio.create_task(serve_many(config, stop, MCP_SERVICES))
            env = {**os.environ, "NATS_URL": server.url}
            first = await _initialize_with_retry(root, env)
            samples: list[float] = []
            baselines: list[float] = []
            for _ in range(runs):
                samples.append(await _initialize_once(root, env))
                baselines.append(await asyncio.to_thread(measure_baseline))
            stop.set()
            await services
        finally:
            server.stop()
    return first, statistics.median(samples), statistics.median(baselines)


async def _initialize_with_retry(root: Path, env: dict[str, str]) -> float:
    """The first answer, once the services answer at all (they start in this process)."""
    from jidocode.shared.bus import Bus
    from jidocode.shared.clients import EngineClient
    from jidocode.shared.config import Config
    from jidocode.shared.errors import JidoError

    bus = await Bus.connect(Config(nats_url=env["NATS_URL"]), "bench")
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                await EngineClient(bus).list_projects()  # the engine answers (no project started)
                break
            except JidoError:
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.05)
    finally:
        await bus.close()
    return await _initialize_once(root, env)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=5, help="processes per figure (the median is printed)")
    parser.add_argument("--no-mcp", action="store_true", help="skip the `jidocode mcp` initialize figure")
    opts = parser.parse_args()
    os.environ.setdefault("COLUMNS", "100")
    load = os.getloadavg()[0]
    print(f"load average {load:.2f}, {os.cpu_count()} cores, {opts.runs} runs each (medians)")
    medians = _medians(_cases(), opts.runs)
    base, typer_base = medians["python -c pass"], medians['python -c "import typer"']
    for name, seconds in medians.items():
        goal = 0.3 if name.startswith("jidocode ") else None
        print(_row(name, seconds, base, typer_base, goal))
    slowest = max((s, n) for n, s in medians.items() if n.startswith("jidocode "))
    print(f"slowest command start: {slowest[1]} {slowest[0] * 1e3:.0f} ms")
    if not opts.no_mcp:
        first, again, mcp_base = asyncio.run(
            _mcp_initialize(opts.runs, lambda: _timed([PYTHON, "-c", "pass"]))
        )
        print(_row("jidocode mcp: initialize (first)", first, mcp_base, typer_base, 1.5))
        print(_row("jidocode mcp: initialize (running)", again, mcp_base, typer_base, 1.5))
    print(f"load average at the end {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
