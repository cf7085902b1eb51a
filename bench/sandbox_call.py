"""One sandboxed command's cost: ``prepare`` + ``run_command`` + ``close`` against a bare ``bash -c``.

    python bench/sandbox_call.py [--runs 40] [--modes bubblewrap,landlock]

The command is what a small tool call runs: ``echo x >> out/f`` in a git repository whose protected
paths the guard snapshots, watches while the call runs (decision 0307) and repairs. The baseline is
the same ``bash -c`` started with ``asyncio.create_subprocess_exec`` in the same run, so the ratio
holds on a noisy machine. Prints the median and p90 of each phase per mode, and the ratio of the
whole to the baseline. A mode this machine cannot run is skipped with its reason.
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
from pathlib import Path

# Run as a script, this file's folder comes first on sys.path: keep its modules from shadowing packages.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]

from jidocode.shared import sandbox  # noqa: E402

COMMAND = "echo x >> out/f"


def _p(values: list[float], q: float) -> float:
    return sorted(values)[min(len(values) - 1, int(q * len(values)))] * 1000


async def _baseline(root: str, runs: int) -> list[float]:
    out = []
    for _ in range(runs):
        t = time.perf_counter()
        proc = await asyncio.create_subprocess_exec("/bin/bash", "-c", COMMAND, cwd=root)
        await proc.wait()
        out.append(time.perf_counter() - t)
    return out


async def _sandboxed(root: str, runs: int) -> dict[str, list[float]]:
    phases: dict[str, list[float]] = {"prepare": [], "run": [], "close": [], "whole": []}
    for _ in range(runs):
        t0 = time.perf_counter()
        launch = await sandbox.prepare(["/bin/bash", "-c", COMMAND], root=root)
        t1 = time.perf_counter()
        try:
            await sandbox.run_command(
                launch.argv,
                cwd=launch.cwd,
                timeout_s=30,
                output_cap=4096,
                env=launch.env,
                pass_fds=launch.pass_fds,
                graceful=launch.graceful_stop,
                info_fd=launch.info_fd,
                on_spawn=launch.attach,
            )
        finally:
            t2 = time.perf_counter()
            await launch.close()
        t3 = time.perf_counter()
        for name, value in (("prepare", t1 - t0), ("run", t2 - t1), ("close", t3 - t2), ("whole", t3 - t0)):
            phases[name].append(value)
    return phases


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=40)
    parser.add_argument("--modes", default="bubblewrap,landlock")
    args = parser.parse_args()
    caps = sandbox.detect()
    print(f"load average {os.getloadavg()[0]:.2f}; {args.runs} runs each")
    for mode in args.modes.split(","):
        if mode == "bubblewrap" and not caps.bwrap:
            print(f"{mode}: skipped ({caps.bwrap_problem})")
            continue
        if mode == "landlock" and not caps.landlock_abi:
            print(f"{mode}: skipped ({caps.landlock_problem})")
            continue
        with tempfile.TemporaryDirectory(prefix="bench-sandbox-") as tmp:
            home = Path(tmp) / "jido_home"
            home.mkdir()
            (home / "settings.json").write_text(json.dumps({"sandbox": {"mode": mode}}))
            os.environ["JIDO_CODE_HOME"] = str(home)
            root = Path(tmp) / "project"
            (root / "out").mkdir(parents=True)
            subprocess.run(["git", "init", "-q", str(root)], check=True)
            base = asyncio.run(_baseline(str(root), args.runs))
            phases = asyncio.run(_sandboxed(str(root), args.runs))
        shown = "  ".join(
            f"{name} {statistics.median(v) * 1000:.1f} ms (p90 {_p(v, 0.9):.1f})"
            for name, v in phases.items()
        )
        ratio = statistics.median(phases["whole"]) / statistics.median(base)
        print(f"{mode}: {shown}")
        print(f"{mode}: bare bash -c {statistics.median(base) * 1000:.1f} ms; sandboxed / bare = {ratio:.2f}")


if __name__ == "__main__":
    main()
