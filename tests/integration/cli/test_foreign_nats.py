"""Something else on the NATS port is named as such, not taken for a JidoCode that is not running.

A plain TCP program (it accepts and never speaks NATS) and a foreign nats-server (its own users:
ours are refused) are reached through ``NATS_URL`` on a free port, as the CLI would meet them on
4222; and a failed connection attempt is never logged as an error with an empty message.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from jidocode.shared.bus import connect_nats
from jidocode.shared.config import Config
from jidocode.shared.natsserver import NatsServer

FOREIGN = "(not JidoCode's NATS)"

#: Each test runs the CLI (and `up`, `doctor`) in subprocesses: slow to start on a loaded machine.
pytestmark = pytest.mark.timeout(300)


@pytest.fixture
def silent_listener() -> Iterator[int]:
    """The port of a program that accepts connections and never says a word (as an HTTP server)."""
    server = socket.create_server(("127.0.0.1", 0))
    accepted: list[socket.socket] = []
    stop = threading.Event()

    def serve() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            accepted.append(conn)  # kept open, never written to

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield int(server.getsockname()[1])
    finally:
        stop.set()
        thread.join(10)
        server.close()
        for conn in accepted:
            conn.close()


@pytest.fixture
def foreign_nats(tmp_path: Path) -> Iterator[str]:
    """A nats-server that is not JidoCode's: its own user, no other accepted."""
    server = NatsServer(
        store_dir=tmp_path / "foreign-js",
        sync="default",
        extra_config='authorization { user: "alice", password: "not-jidocode-secret" }',
    ).start()
    try:
        yield server.url
    finally:
        server.stop()


async def _jidocode(tmp_path: Path, nats_url: str, *argv: str, timeout: float = 120) -> tuple[int, str]:
    """``jidocode <argv>`` with ``NATS_URL`` set and a fresh data home: exit code and output."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("NATS_")}
    env.update(
        NATS_URL=nats_url,
        JIDO_DATA_HOME=str(tmp_path / "data"),
        JIDO_CODE_HOME=str(tmp_path / "home"),
        COLUMNS="400",  # one message, one line
    )
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "jidocode.cli.main",
        *argv,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    out, _ = await asyncio.wait_for(proc.communicate(), timeout)
    assert proc.returncode is not None
    return proc.returncode, out.decode()


def _no_empty_error_line(output: str) -> None:
    for line in output.splitlines():
        assert not line.startswith("nats error (") or line.split("):", 1)[1].strip(), output


@pytest.mark.parametrize("argv", [("projects", "list"), ("status",)])
async def test_a_program_that_does_not_speak_nats_is_named(
    tmp_path: Path, silent_listener: int, argv: tuple[str, ...]
) -> None:
    code, said = await _jidocode(tmp_path, f"nats://127.0.0.1:{silent_listener}", *argv)
    assert code == 1, said
    assert f"something else is listening on 127.0.0.1:{silent_listener} {FOREIGN}" in said, said
    assert "no NATS greeting" in said and "is JidoCode running" not in said, said
    _no_empty_error_line(said)


@pytest.mark.parametrize("argv", [("projects", "list"), ("status",)])
async def test_a_nats_server_that_refuses_our_credentials_is_named(
    tmp_path: Path, foreign_nats: str, argv: tuple[str, ...]
) -> None:
    port = foreign_nats.rsplit(":", 1)[1]
    code, said = await _jidocode(tmp_path, foreign_nats, *argv)
    assert code == 1, said
    assert f"something else is listening on 127.0.0.1:{port} {FOREIGN}" in said, said
    assert "refused JidoCode's credentials" in said and "is JidoCode running" not in said, said


async def test_up_and_doctor_name_the_program_on_the_nats_url(tmp_path: Path, silent_listener: int) -> None:
    url = f"nats://127.0.0.1:{silent_listener}"
    # up gives up at once: waiting cannot move another program off the port
    code, said = await _jidocode(tmp_path, url, "up", "--nats-wait", "600")
    assert code == 1 and f"something else is listening on 127.0.0.1:{silent_listener} {FOREIGN}" in said, said
    code, said = await _jidocode(tmp_path, url, "doctor", "--no-check")
    assert code == 1, said
    system = next(line for line in said.splitlines() if line.startswith("system:"))
    assert f"something else is listening on 127.0.0.1:{silent_listener} {FOREIGN}" in system, said


async def test_nothing_listening_still_says_how_to_start_jidocode(tmp_path: Path) -> None:
    with socket.create_server(("127.0.0.1", 0)) as held:
        port = held.getsockname()[1]
    code, said = await _jidocode(tmp_path, f"nats://127.0.0.1:{port}", "projects", "list")
    assert code == 1 and "is JidoCode running? Start it with `jidocode up`" in said, said
    assert FOREIGN not in said


class _Records(logging.Handler):
    """The ``jidocode.bus`` records, and an event set on the first failed attempt."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []
        self.attempt_failed = asyncio.Event()
        self._loop = asyncio.get_running_loop()

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)
        if "connection attempt failed" in record.getMessage():
            self._loop.call_soon_threadsafe(self.attempt_failed.set)


async def test_a_waiting_connection_attempt_that_times_out_is_not_an_empty_error(
    silent_listener: int,
) -> None:
    # what `up`'s progress connection meets on a loaded machine: the server's greeting comes late
    records = _Records()
    bus_log = logging.getLogger("jidocode.bus")
    bus_log.addHandler(records)
    level = bus_log.level
    bus_log.setLevel(logging.DEBUG)
    waiting = asyncio.create_task(
        connect_nats(Config(nats_url=f"nats://127.0.0.1:{silent_listener}"), "up-progress", wait=True)
    )
    try:
        await asyncio.wait_for(records.attempt_failed.wait(), 60)
    finally:
        waiting.cancel()
        await asyncio.gather(waiting, return_exceptions=True)
        bus_log.removeHandler(records)
        bus_log.setLevel(level)
    failed = [r for r in records.records if "up-progress" in r.getMessage()]
    assert failed and all(r.levelno < logging.WARNING for r in failed), [r.getMessage() for r in failed]
    assert all(r.getMessage().rstrip().endswith("TimeoutError") for r in failed), [
        r.getMessage() for r in failed
    ]
