"""A 3-node nats-server cluster with JetStream on loopback ports, for failover tests."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import nats
import nats.errors
import nats.js.errors
from nats.js.api import StreamConfig

from jidocode.shared.natsserver import NatsServer, free_port

CLUSTER = "jido-test"
_PROBE_STREAM = "CLUSTER_READY_PROBE"


@dataclass
class Cluster:
    nodes: list[NatsServer]

    @property
    def url(self) -> str:
        """Every node, as services get it (``NATS_URL`` with a comma-separated list)."""
        return ",".join(n.url for n in self.nodes)

    def node(self, server_name: str) -> NatsServer:
        return next(n for n in self.nodes if n.server_name == server_name)

    def alive(self) -> list[NatsServer]:
        return [n for n in self.nodes if n.process is not None and n.process.poll() is None]


@contextmanager
def nats_cluster(tmp: Path, size: int = 3) -> Iterator[Cluster]:
    ports = [(free_port(), free_port()) for _ in range(size)]
    nodes = []
    for i, (port, cluster_port) in enumerate(ports):
        routes = [f"nats://127.0.0.1:{cp}" for j, (_, cp) in enumerate(ports) if j != i]
        nodes.append(
            NatsServer(
                store_dir=tmp / f"n{i + 1}",
                port=port,
                server_name=f"n{i + 1}",
                sync="default",
                cluster_name=CLUSTER,
                cluster_port=cluster_port,
                routes=routes,
            )
        )
    try:
        for node in nodes:
            node.start()
        yield Cluster(nodes)
    finally:
        for node in nodes:
            node.stop()


async def wait_jetstream_cluster(
    url: str,
    replicas: int = 3,
    timeout: float = 60.0,
    *,
    as_user: tuple[str, str] | None = None,
    stream: str = _PROBE_STREAM,
    stream_subjects: tuple[str, ...] = ("probe.ready",),
) -> None:
    """Return once the cluster can place a stream with ``replicas`` replicas (meta leader and peers known).

    ``as_user`` (name, password) connects as that generated NATS user, which must be allowed to create
    and delete ``stream``.
    """
    options: dict[str, object] = {"connect_timeout": 2}
    if as_user is not None:
        options |= {"user": as_user[0], "password": as_user[1], "inbox_prefix": f"_INBOX_{as_user[0]}"}
    nc = await nats.connect(url.split(","), **options)  # type: ignore[arg-type]
    try:
        js = nc.jetstream(timeout=2)

        async def loop() -> None:
            while True:
                try:
                    await js.add_stream(
                        StreamConfig(name=stream, subjects=list(stream_subjects), num_replicas=replicas)
                    )
                    await js.delete_stream(stream)
                    return
                except (nats.js.errors.APIError, nats.errors.TimeoutError, nats.errors.NoRespondersError):
                    await asyncio.sleep(0.1)  # polling for a cluster to form, not synchronising on an event

        await asyncio.wait_for(loop(), timeout)
    finally:
        await nc.close()


async def stream_leader(url: str, stream: str) -> str:
    nc = await nats.connect(url.split(","), connect_timeout=2)
    try:
        info = await nc.jetstream().stream_info(stream)
        assert info.cluster is not None and info.cluster.leader
        return info.cluster.leader
    finally:
        await nc.close()


async def wait_leaders_elected(url: str, dead: str, timeout: float = 60.0) -> None:
    """Return once the meta group and every stream (KV buckets included) have a live leader again."""
    nc = await nats.connect(url.split(","), connect_timeout=2)
    try:
        js = nc.jetstream(timeout=2)

        async def settled() -> bool:
            try:
                await js.account_info()
                infos = await js.streams_info()
            except (nats.js.errors.APIError, nats.errors.TimeoutError, nats.errors.NoRespondersError):
                return False
            return all(i.cluster is not None and i.cluster.leader not in (None, "", dead) for i in infos)

        async def loop() -> None:
            while True:
                if await settled():
                    return
                await asyncio.sleep(0.1)  # polling for elections to finish, not synchronising on an event

        await asyncio.wait_for(loop(), timeout)
    finally:
        await nc.close()
