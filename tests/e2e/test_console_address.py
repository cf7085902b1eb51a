"""The console's address: the port the gateway really listens on, shown only for our own gateway.

``jidocode up`` prints the login URL of the port its gateway got (8765 busy: the free port it
chose; ``--gateway-port``: that one), once the program there proved it holds the token; another
program on that port never sees the token. ``up.json``, ``status``, ``doctor`` and ``console``
show the same address.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest

from jidocode.shared.config import RunningSystem, running_file
from jidocode.shared.natsserver import free_port

#: A whole `up` starts in each test: minutes on a loaded machine (every wait is bounded below).
pytestmark = [pytest.mark.slow, pytest.mark.timeout(400)]

LOGIN = r"open the console: (http://127\.0\.0\.1:(\d+)/login\?token=(\S+))"
EMPTY_NATS_ERROR = re.compile(r"nats error \([^)]*\):\s*$")


class FakeGateway:
    """An HTTP program on a port that says it is healthy to every GET and records what it got."""

    def __init__(self, port: int = 0) -> None:
        self.requests: list[str] = []
        seen = self.requests

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                seen.append(f"{self.requestline}\n{self.headers}")
                body = b'{"status": "ok"}'
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.port = int(self.server.server_address[1])
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(10)


@pytest.fixture
def fake_gateway() -> Iterator[FakeGateway]:
    fake = FakeGateway()
    try:
        yield fake
    finally:
        fake.stop()


class Up:
    """``jidocode up`` in a fresh data home, its output read line by line."""

    def __init__(self, tmp: Path, *argv: str, env: dict[str, str] | None = None) -> None:
        base = {k: v for k, v in os.environ.items() if not k.startswith("NATS_") and k != "JIDO_GATEWAY_PORT"}
        self.data_home = tmp / "data"
        self.env = {
            **base,
            "JIDO_DATA_HOME": str(self.data_home),
            "JIDO_CODE_HOME": str(tmp / "home"),
            "PYTHONUNBUFFERED": "1",
            "COLUMNS": "400",
            **(env or {}),
        }
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "jidocode.cli.main",
                "up",
                "--port",
                str(free_port()),
                "--grace",
                "5",
                *argv,
            ],
            env=self.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        self.lines: list[str] = []
        self._queue: asyncio.Queue[str] = asyncio.Queue()
        loop = asyncio.get_running_loop()

        def pump() -> None:
            assert self.proc.stdout is not None
            for line in self.proc.stdout:
                loop.call_soon_threadsafe(self._queue.put_nowait, line.rstrip())
            loop.call_soon_threadsafe(self._queue.put_nowait, "<eof>")

        loop.run_in_executor(None, pump)

    async def wait_line(self, pattern: str, timeout: float = 120) -> re.Match[str]:
        async def loop() -> re.Match[str]:
            while True:
                line = await self._queue.get()
                self.lines.append(line)
                if line == "<eof>":
                    raise AssertionError("jidocode up ended early:\n" + "\n".join(self.lines[-40:]))
                if m := re.search(pattern, line):
                    return m

        return await asyncio.wait_for(loop(), timeout)

    async def seen_or_wait(self, pattern: str, timeout: float = 120) -> re.Match[str]:
        """A line matching ``pattern``: one already read (while waiting for another), else the next
        one (``up`` prints its lines in an order its services' start decides)."""
        for line in self.lines:
            if m := re.search(pattern, line):
                return m
        return await self.wait_line(pattern, timeout)

    async def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            with contextlib.suppress(AssertionError):
                await self.wait_line(r"all stopped", timeout=60)
        try:
            await asyncio.to_thread(self.proc.wait, 30)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()

    def token(self) -> str:
        return (self.data_home / "gateway" / "token").read_text().strip()

    def running(self) -> RunningSystem:
        return RunningSystem.model_validate_json(running_file(self.data_home).read_bytes())

    async def cli(self, *argv: str, env: dict[str, str] | None = None) -> tuple[int, str, str]:
        """``jidocode <argv>`` from another terminal on this data home: exit code, stdout, stderr."""
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "jidocode.cli.main",
            *argv,
            env={**self.env, **(env or {})},
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        out, err = await asyncio.wait_for(proc.communicate(), 120)
        assert proc.returncode is not None
        return proc.returncode, out.decode(), err.decode()


@contextlib.contextmanager
def holding(port: int) -> Iterator[bool]:
    """Listen on ``port`` (a program holding it) while the block runs; ``False`` when another
    program already holds it (busy all the same)."""
    try:
        held = socket.create_server(("127.0.0.1", port))
    except OSError:
        yield False
        return
    try:
        yield True
    finally:
        held.close()


async def test_8765_busy_the_console_address_is_the_free_port_everywhere(tmp_path: Path) -> None:
    browser_log = tmp_path / "browser.log"
    browser = tmp_path / "browser.sh"
    browser.write_text(f'#!/bin/sh\nprintf "%s\\n" "$1" >> {browser_log}\n')
    browser.chmod(0o755)
    with holding(8765):
        up = Up(tmp_path)
        try:
            chosen = int(
                (await up.wait_line(r"port 8765 is busy; the gateway uses the free port (\d+)")).group(1)
            )
            login = await up.wait_line(LOGIN)
            assert int(login.group(2)) == chosen and login.group(3) == up.token()
            base = f"http://127.0.0.1:{chosen}"
            assert up.running().gateway == base  # up.json
            async with httpx.AsyncClient(timeout=30, trust_env=False) as http:
                opened = await http.get(login.group(1))
                assert opened.status_code == 303 and "jidocode_token" in opened.headers["set-cookie"]

            code, out, err = await up.cli("console")
            assert (code, out, err) == (0, login.group(1) + "\n", ""), (code, out, err)
            code, out, err = await up.cli("console", "--open", env={"BROWSER": str(browser)})
            assert code == 0 and out == login.group(1) + "\n", (out, err)
            assert browser_log.read_text().splitlines() == [login.group(1)]
            no_browser = {
                "BROWSER": "",
                "DISPLAY": "",
                "WAYLAND_DISPLAY": "",
                "PATH": str(tmp_path / "empty"),
            }
            code, out, err = await up.cli("console", "--open", env=no_browser)
            assert code == 0 and out == login.group(1) + "\n" and "no browser found here" in err, (out, err)

            await up.seen_or_wait(r"all \d+ services ready")
            code, out, err = await up.cli("status")
            assert code == 0 and f"console: {base} " in out, (out, err)
            code, out, err = await up.cli("doctor", "--no-check", "--json")
            checks = {c["name"]: c for c in json.loads(out)["checks"]}
            assert checks["console"]["status"] == "ok" and checks["console"]["url"] == base, checks["console"]
        finally:
            await up.stop()
    assert not [line for line in up.lines if EMPTY_NATS_ERROR.search(line)], up.lines


async def test_a_program_on_the_gateway_port_never_gets_the_token(
    tmp_path: Path, fake_gateway: FakeGateway
) -> None:
    port = fake_gateway.port
    up = Up(tmp_path, "--gateway-port", str(port))
    try:
        await up.wait_line(rf"something else answers on 127\.0\.0\.1:{port} \(not this system's gateway")
        token = up.token()
        assert fake_gateway.requests, "up asked the program on the port"
        assert not [r for r in fake_gateway.requests if token in r], fake_gateway.requests
        assert not [line for line in up.lines if token in line]
        assert up.running().gateway is None  # up.json names no console while it is not ours
        code, out, err = await up.cli("console")
        assert code == 1 and token not in out + err and "shows no gateway" in err, (out, err)

        # the program lets the port go: the gateway (restarted with backoff) takes it, proves itself
        asked = len(fake_gateway.requests)
        fake_gateway.stop()
        login = await up.wait_line(LOGIN, timeout=180)
        assert int(login.group(2)) == port and login.group(3) == token
        assert up.running().gateway == f"http://127.0.0.1:{port}"
        assert not [r for r in fake_gateway.requests[asked:] if token in r]
    finally:
        await up.stop()


async def test_console_refuses_a_recorded_address_another_program_answers(
    tmp_path: Path, fake_gateway: FakeGateway
) -> None:
    # up.json names a gateway (an `up` that is alive: this test's process), but the port now
    # belongs to another program
    data = tmp_path / "data"
    (data / "gateway").mkdir(parents=True)
    token = "t" * 43
    (data / "gateway" / "token").write_text(token + "\n")
    base = f"http://127.0.0.1:{fake_gateway.port}"
    running_file(data).write_text(
        RunningSystem(pid=os.getpid(), url=f"nats://127.0.0.1:{free_port()}", gateway=base).model_dump_json()
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("NATS_") and k != "JIDO_GATEWAY_TOKEN"}
    env.update(JIDO_DATA_HOME=str(data), JIDO_CODE_HOME=str(tmp_path / "home"), COLUMNS="400")
    done = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "jidocode.cli.main", "console", "--open"],
        env={**env, "BROWSER": "/bin/false"},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 1 and done.stdout == "", (done.stdout, done.stderr)
    assert f"something else answers on 127.0.0.1:{fake_gateway.port}" in done.stderr, done.stderr
    assert fake_gateway.requests and not [r for r in fake_gateway.requests if token in r]
    done = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "jidocode.cli.main", "doctor", "--no-check", "--json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    console = next(c for c in json.loads(done.stdout)["checks"] if c["name"] == "console")
    assert console["status"] == "warn" and console["url"] is None, console
    assert token not in done.stdout + done.stderr
