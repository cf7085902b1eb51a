"""Run JidoCode services as separate processes, each as its own NATS user: the shape of a deployment."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import nats
import nats.errors
from nats.aio.client import Client

from jidocode.shared import subjects


@dataclass
class ServiceProcess:
    name: str
    env: dict[str, str]
    log: Path
    proc: subprocess.Popen[bytes] | None = field(default=None, init=False)

    restarts: int = field(default=0, init=False)

    def start(self) -> None:
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "jidocode.cli.main", "serve", self.name],
                env=self.env,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    async def terminate(self, timeout: float = 20.0) -> int:
        """SIGTERM, as docker stop and Kubernetes send it; the exit code once drained."""
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        return await asyncio.wait_for(asyncio.to_thread(self.proc.wait), timeout)

    def restart_if_exited(self, limit: int = 3) -> None:
        """Compose's ``restart: unless-stopped`` for the start-up phase: a service that exited
        (say, a JetStream API timeout while the young cluster settles) is started again."""
        assert self.proc is not None
        if self.proc.poll() is not None and self.restarts < limit:
            self.restarts += 1
            self.start()

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    def output(self) -> str:
        return self.log.read_text(errors="replace")


async def probe(name: str, env: Mapping[str, str], timeout: float = 30.0) -> int:
    """``jidocode probe <name>`` with the service's own environment (the container health check)."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "jidocode.cli.main",
        "probe",
        name,
        "--timeout",
        "10",
        env=dict(env),
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
    )
    return await asyncio.wait_for(proc.wait(), timeout)


async def wait_answering(
    nc: Client, names: tuple[str, ...], timeout: float = 60.0, processes: tuple[ServiceProcess, ...] = ()
) -> None:
    """Return once each named service answers ``$SRV.PING.<name>`` (restarting ``processes`` that exit)."""

    async def one(name: str) -> None:
        while True:
            try:
                await nc.request(subjects.srv("PING", name), b"", timeout=1.0)
                return
            except (nats.errors.NoRespondersError, nats.errors.TimeoutError):
                for p in processes:
                    if p.name == name:
                        p.restart_if_exited()
                # polling for a process to come up, not synchronising on an event
                await asyncio.sleep(0.05)

    await asyncio.wait_for(asyncio.gather(*(one(n) for n in names)), timeout)


@contextlib.contextmanager
def killed_on_exit(processes: list[ServiceProcess]):  # type: ignore[no-untyped-def]
    try:
        yield processes
    finally:
        for p in processes:
            p.kill()
