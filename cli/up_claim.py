"""`jidocode up`'s hold on its data home and its choice of port (see :mod:`.up`'s docstring).

One ``up`` per data home: an exclusive ``flock`` on ``<data home>/up.lock`` for its lifetime, its
pid and NATS URL in ``<data home>/up.json``. Port: an explicit ``--port`` is used or refused, never
moved; without one, 4222 when free, else a free port.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Final, TextIO

import typer

from jidocode.shared.config import RunningSystem, running_file
from jidocode.shared.natsserver import free_port, write_private

from .supervisor import children_file, describe_survivors, say, survivors

__all__ = [
    "DEFAULT_PORT",
    "Claim",
    "choose_port",
    "claim_data_home",
    "port_free",
    "refuse_while_children_live",
]

#: The embedded server's port when ``--port`` is not given (and it is free).
DEFAULT_PORT: Final = 4222


def port_free(port: int, host: str = "127.0.0.1") -> bool:
    """Whether nothing listens on ``host:port``: a bind with ``SO_REUSEADDR`` (as nats-server's
    own listener), so TIME-WAIT sockets of a server just stopped do not make it look busy."""
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def choose_port(port: int | None) -> int:
    """An explicit ``port`` if free (else exit 1: never moved); without one, 4222 or a free port."""
    if port is not None:
        if not port_free(port):
            say(
                "up",
                f"port {port} is busy: another program listens there (`ss -ltnp 'sport = :{port}'` shows "
                "which). Stop it, pass another --port, or omit --port to use 4222 or a free one.",
                "red",
            )
            raise typer.Exit(1)
        return port
    if port_free(DEFAULT_PORT):
        return DEFAULT_PORT
    chosen = free_port()
    say(
        "up",
        f"port {DEFAULT_PORT} is busy; using the free port {chosen} (other terminals find it by themselves)",
    )
    return chosen


class Claim:
    """This process's hold on a data home: the locked ``up.lock`` and our ``up.json``."""

    def __init__(self, data_home: Path, lock: TextIO) -> None:
        self.data_home = data_home
        self.lock = lock
        self.info: RunningSystem | None = None

    def announce(self, url: str) -> None:
        """Write ``up.json``: this process and its NATS URL."""
        self._write(RunningSystem(pid=os.getpid(), url=url))

    def announce_gateway(self, base_url: str) -> None:
        """Add the checked gateway's base URL to ``up.json`` (after :meth:`announce`)."""
        if self.info is not None:
            self._write(self.info.model_copy(update={"gateway": base_url}))

    def _write(self, info: RunningSystem) -> None:
        self.info = info
        write_private(running_file(self.data_home), info.model_dump_json() + "\n")


def refuse_while_children_live(data_home: Path) -> None:
    """Exit 1, naming them, while services an earlier ``up`` started on ``data_home`` still run:
    they would join this system's server and answer there."""
    found = survivors(children_file(data_home))
    if found:
        say("up", describe_survivors(found, data_home), "red")
        raise typer.Exit(1)


@contextlib.contextmanager
def claim_data_home(data_home: Path) -> Iterator[Claim]:
    """Hold ``<data home>/up.lock`` (an exclusive ``flock``) while the block runs; if another
    process holds it, say which (pid and URL from ``up.json``) and exit 1."""
    data_home.mkdir(parents=True, exist_ok=True, mode=0o700)
    lock = (data_home / "up.lock").open("a")
    try:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            try:
                other: RunningSystem | None = RunningSystem.model_validate_json(
                    running_file(data_home).read_bytes()
                )
            except (OSError, ValueError):
                other = None
            who = (
                f"pid {other.pid}, NATS at {other.url}"
                if other is not None
                else "it is still starting: its pid and URL are not written yet"
            )
            say(
                "up",
                f"jidocode up is already running on this data home ({data_home}): {who}. "
                "Use that one (every command finds it by itself), stop it first, "
                "or set JIDO_DATA_HOME to another folder.",
                "red",
            )
            raise typer.Exit(1) from None
        claim = Claim(data_home, lock)
        try:
            yield claim
        finally:
            path = running_file(data_home)
            with contextlib.suppress(OSError, ValueError):
                if RunningSystem.model_validate_json(path.read_bytes()).pid == os.getpid():
                    path.unlink()
    finally:
        lock.close()  # releases the flock
