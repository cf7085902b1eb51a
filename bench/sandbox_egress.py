"""What the egress proxy's wiring costs a sandboxed command: the same launch with and without it.

    python bench/sandbox_egress.py [--runs 20] [--modes bubblewrap,landlock]

Per sandbox mode, the median and p90 of ``prepare`` + ``run_command`` + ``close`` of ``/bin/true``
without network and with an :class:`~jidocode.shared.sandbox.Egress` (under bubblewrap that adds
the bridge's start: an interpreter, a listening socket, a double fork), and of one ``curl`` request
through the proxy variables to a stand-in proxy in this process (which answers it itself: nothing
leaves the machine). A mode this machine cannot run is skipped with its reason.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# Run as a script, this file's folder comes first on sys.path: keep its modules from shadowing packages.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]

from jidocode.shared import sandbox  # noqa: E402

_ANSWER = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok"


def _p(values: list[float], q: float) -> float:
    return sorted(values)[min(len(values) - 1, int(q * len(values)))] * 1000


async def _answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    while (await reader.readline()).strip():
        pass
    writer.write(_ANSWER)
    await writer.drain()
    writer.close()


async def _once(root: str, jido_home: str, argv: list[str], egress: sandbox.Egress | None) -> float:
    t = time.perf_counter()
    launch = await sandbox.prepare(argv, root=root, jido_home=jido_home, egress=egress)
    try:
        result = await sandbox.run_command(
            launch.argv,
            cwd=launch.cwd,
            timeout_s=30,
            output_cap=4096,
            env=launch.env,
            pass_fds=launch.pass_fds,
            graceful=launch.graceful_stop,
            info_fd=launch.info_fd,
        )
    finally:
        await launch.close()
    if result["exit_code"] != 0:
        raise SystemExit(f"{argv} failed: {result}")
    return time.perf_counter() - t


def _project(mode: str, base: str) -> tuple[str, str]:
    """A git repository and a JidoCode home whose settings pick ``mode``."""
    jido_home = os.path.join(base, f"home-{mode}")
    os.mkdir(jido_home)
    with open(os.path.join(jido_home, "settings.json"), "w") as f:
        json.dump({"sandbox": {"mode": mode}}, f)
    root = os.path.join(base, f"proj-{mode}")
    subprocess.run(["git", "init", "-q", root], check=True)
    return root, jido_home


async def _mode(mode: str, base: str, runs: int, egress: sandbox.Egress) -> None:
    root, jido_home = _project(mode, base)
    curl = shutil.which("curl") or "/usr/bin/curl"
    cases = (
        ("true, no network", ["/bin/true"], None),
        ("true, egress", ["/bin/true"], egress),
        ("curl via proxy", [curl, "-sS", "-o", "/dev/null", "http://example.test/"], egress),
    )
    for label, argv, way in cases:
        await _once(root, jido_home, argv, way)  # warm
        times = [await _once(root, jido_home, argv, way) for _ in range(runs)]
        print(f"{mode:10s} {label:18s} median {_p(times, 0.5):6.1f} ms  p90 {_p(times, 0.9):6.1f} ms")


async def main(runs: int, modes: list[str]) -> None:
    caps = sandbox.detect()
    with tempfile.TemporaryDirectory() as base:
        sock = os.path.join(base, "egress.sock")
        unix = await asyncio.start_unix_server(_answer, sock)
        tcp = await asyncio.start_server(_answer, "127.0.0.1", 0)
        egress = sandbox.Egress(socket=sock, port=tcp.sockets[0].getsockname()[1])
        for mode in modes:
            if mode == "bubblewrap" and not caps.bwrap:
                print(f"{mode}: skipped: {caps.bwrap_problem}")
            elif mode == "landlock" and caps.landlock_abi < 4:
                print(f"{mode}: skipped: Landlock ABI {caps.landlock_abi} (< 4) has no network rules")
            else:
                await _mode(mode, base, runs, egress)
        for server in (unix, tcp):
            server.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--modes", default="bubblewrap,landlock")
    args = parser.parse_args()
    asyncio.run(main(args.runs, args.modes.split(",")))
