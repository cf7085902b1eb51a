"""What the egress proxy costs a connection: the decision, the tunnel's set-up, its throughput.

    python bench/egress_proxy.py [--runs 200] [--mebibytes 64]

In this process: an :class:`~jidocode.shared.egress.EgressProxy` with a pass, and an origin on
this machine's LAN address (the proxy never connects to loopback) that the pass's rules allow
through an IP entry. Prints the median and p90 of a ``CONNECT`` answered 200 (rules, resolution,
address checks, the connection to the origin), of one refused by a deny entry (403), and the
throughput of ``--mebibytes`` sent through one tunnel and echoed back. Nothing leaves the machine.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import ipaddress
import json
import socket
import sys
import tempfile
import time
from pathlib import Path

# Run as a script, this file's folder comes first on sys.path: keep its modules from shadowing packages.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]

from jidocode.shared.egress import PROXY_USER, CallScope, EgressProxy, Pass, table_resolver  # noqa: E402
from jidocode.shared.policy import Policy  # noqa: E402

_CHUNK = 256 * 1024


def _lan_address() -> str | None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("192.0.2.1", 9))
        except OSError:
            return None
        address = str(probe.getsockname()[0])
    return None if ipaddress.ip_address(address).is_loopback else address


def _ms(values: list[float], q: float) -> float:
    return round(sorted(values)[min(len(values) - 1, int(q * len(values)))] * 1000, 3)


async def _echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    while chunk := await reader.read(_CHUNK):
        writer.write(chunk)
        await writer.drain()
    writer.close()


async def _connect(
    proxy: EgressProxy, grant: Pass, host: str, port: int
) -> tuple[str, asyncio.StreamReader, asyncio.StreamWriter]:
    reader, writer = await asyncio.open_connection("127.0.0.1", proxy.tcp_port, limit=_CHUNK)
    auth = base64.b64encode(f"{PROXY_USER}:{grant.token}".encode()).decode()
    writer.write(f"CONNECT {host}:{port} HTTP/1.1\r\nProxy-Authorization: Basic {auth}\r\n\r\n".encode())
    await writer.drain()
    head = await reader.readuntil(b"\r\n\r\n")
    return head.split(b"\r\n", 1)[0].decode(), reader, writer


async def _timed(
    proxy: EgressProxy, grant: Pass, host: str, port: int, runs: int, status: str
) -> list[float]:
    times: list[float] = []
    for _ in range(runs):
        t = time.perf_counter()
        line, _, writer = await _connect(proxy, grant, host, port)
        times.append(time.perf_counter() - t)
        writer.close()
        if status not in line:
            raise SystemExit(f"CONNECT {host}: {line!r}, expected {status}")
    return times


async def _throughput(proxy: EgressProxy, grant: Pass, port: int, mebibytes: int) -> float:
    _, reader, writer = await _connect(proxy, grant, "origin.bench", port)
    total = mebibytes * 1024 * 1024
    block = b"x" * _CHUNK

    async def send() -> None:
        for _ in range(total // _CHUNK):
            writer.write(block)
            await writer.drain()
        writer.write_eof()

    t = time.perf_counter()
    sender = asyncio.create_task(send())
    got = 0
    while got < total and (chunk := await reader.read(_CHUNK)):
        got += len(chunk)
    await sender
    elapsed = time.perf_counter() - t
    writer.close()
    return round(2 * got / elapsed / 1024 / 1024, 1)


async def main(runs: int, mebibytes: int) -> dict[str, object]:
    lan = _lan_address()
    if lan is None:
        return {"skipped": "this machine has no non-loopback address for the origin"}
    origin = await asyncio.start_server(_echo, host=lan, port=0, limit=_CHUNK)
    port = int(origin.sockets[0].getsockname()[1])
    root = tempfile.mkdtemp(prefix="bench-egress-")
    policy = Policy.build(
        root, allowed_domains=["origin.bench", f"{lan}/32"], denied_domains=["denied.bench"]
    )
    proxy = await EgressProxy.start(resolver=table_resolver({"origin.bench": lan, "denied.bench": lan}))
    try:
        async with proxy.grant(CallScope(project_id="bench", request_id="bench", policy=policy)) as grant:
            allowed = await _timed(proxy, grant, "origin.bench", port, runs, " 200 ")
            refused = await _timed(proxy, grant, "denied.bench", port, runs, " 403 ")
            mib_s = await _throughput(proxy, grant, port, mebibytes)
    finally:
        await proxy.close()
        origin.close()
    return {
        "runs": runs,
        "connect_allowed_ms": {"median": _ms(allowed, 0.5), "p90": _ms(allowed, 0.9)},
        "connect_refused_ms": {"median": _ms(refused, 0.5), "p90": _ms(refused, 0.9)},
        "tunnel_mib_per_s_both_ways": mib_s,
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--mebibytes", type=int, default=64)
    args = parser.parse_args()
    print(json.dumps(asyncio.run(main(args.runs, args.mebibytes)), indent=2))
