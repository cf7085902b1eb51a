"""Process configuration read from the environment, validated at construction.

=====================  =====================================================
variable               meaning
=====================  =====================================================
``NATS_URL``           the NATS server(s) to use; unset means "embedded"
``NATS_USER``/``NATS_PASSWORD``  credentials of this service's NATS user
``NATS_CREDS``         a NATS ``.creds`` file (nkey/JWT), instead of a password
``NATS_INBOX_PREFIX``  this user's private inbox prefix (``_INBOX_<user>``)
``JIDO_CODE_HOME``     the global layer, default ``~/.jido_code``
``JIDO_DATA_HOME``     where ``jidocode up`` keeps the embedded JetStream store
                       and the embedded server's credentials
``JIDO_JS_REPLICAS``   replicas of streams and KV buckets (default: 1, or 3 on a cluster)
``JIDO_INSTANCE``      this replica's name (default ``<host>-<pid>``)
=====================  =====================================================

**Credentials of the embedded server.** ``jidocode up`` runs its NATS server
with one user per service and a ``client`` user (decision 0140) and keeps each
user's credentials in ``<data home>/credentials/<user>.json`` (a 0700 folder,
0600 files). :meth:`Config.from_env` given no ``NATS_USER``/``NATS_CREDS``
picks the ``client`` credentials from there — and the server's URL when no
``NATS_URL`` is set — so the CLI and the SDK connect as the client user with no
manual step. Credentials are only ever sent to the server they belong to: a
``NATS_URL`` naming another server gets none.

**The running system.** While it runs, ``jidocode up`` holds an exclusive
``flock`` on ``<data home>/up.lock`` and describes itself in
``<data home>/up.json`` (its pid and NATS URL): :func:`running_system` reads it
(a file left by a dead process is ignored), so a second ``up`` can name the
first, and every command finds the running system's URL without ``NATS_URL``.
"""

from __future__ import annotations

import json
import logging
import os
import socket
from pathlib import Path
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, ValidationError

__all__ = [
    "CLIENT_USER",
    "DEFAULT_NATS_URL",
    "Config",
    "NatsCredentials",
    "RunningSystem",
    "credentials_dir",
    "default_data_home",
    "default_jido_home",
    "read_credentials",
    "running_file",
    "running_system",
    "same_server",
]

log = logging.getLogger("jidocode.config")

DEFAULT_NATS_URL = "nats://127.0.0.1:4222"
#: The NATS user of the CLI, the SDK and UIs on the embedded server.
CLIENT_USER = "client"
_LOOPBACK = frozenset({"127.0.0.1", "localhost", "::1", "[::1]"})


def default_jido_home() -> Path:
    env = os.environ.get("JIDO_CODE_HOME")
    return Path(env).expanduser() if env else Path.home() / ".jido_code"


def default_data_home() -> Path:
    env = os.environ.get("JIDO_DATA_HOME")
    if env:
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_DATA_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".local" / "share"
    return base / "jidocode"


def credentials_dir(data_home: Path | None = None) -> Path:
    """Where the embedded server's users' credentials live: ``<data home>/credentials``."""
    return (data_home or default_data_home()) / "credentials"


class NatsCredentials(BaseModel):
    """One NATS user of the embedded server, as ``<data home>/credentials/<user>.json`` holds it."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    url: str
    user: str
    password: str = Field(min_length=16)
    inbox_prefix: str | None = None


class RunningSystem(BaseModel):
    """The ``jidocode up`` running on a data home, as ``<data home>/up.json`` describes it."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    pid: int
    url: str
    #: The base URL of its gateway (the web console), once ``up`` checked it answers as its own.
    gateway: str | None = None


def running_file(data_home: Path | None = None) -> Path:
    """``<data home>/up.json``: the pid, NATS URL and gateway URL of the ``jidocode up`` running there."""
    return (data_home or default_data_home()) / "up.json"


def running_system(data_home: Path | None = None) -> RunningSystem | None:
    """The ``jidocode up`` running on ``data_home``; ``None`` when none does (or its file is stale)."""
    try:
        found = RunningSystem.model_validate_json(running_file(data_home).read_bytes())
    except (OSError, ValueError, ValidationError):
        return None
    try:
        os.kill(found.pid, 0)
    except ProcessLookupError:
        return None  # left by a process that died without cleaning up
    except PermissionError:
        pass  # alive, another user's
    return found


def read_credentials(user: str, data_home: Path | None = None) -> NatsCredentials | None:
    """The stored credentials of ``user``; ``None`` when there are none (or they are unreadable)."""
    path = credentials_dir(data_home) / f"{user}.json"
    try:
        raw = path.read_bytes()
        mode = path.stat().st_mode
    except OSError:
        return None
    if mode & 0o077:
        log.warning("%s is readable by other users: `chmod 600 %s`", path, path)
    try:
        creds = NatsCredentials.model_validate(json.loads(raw))
    except (ValueError, ValidationError) as exc:
        log.warning("ignoring unreadable NATS credentials %s: %s", path, exc)
        return None
    return creds if creds.user == user else None


def _endpoint(url: str) -> tuple[str, int]:
    parts = urlsplit(url if "://" in url else f"nats://{url}")
    host = (parts.hostname or "").lower()
    try:
        port = parts.port or 4222
    except ValueError:
        port = -1
    return ("loopback" if host in _LOOPBACK else host), port


def same_server(urls: str, url: str) -> bool:
    """Whether one of the comma-separated ``urls`` names the server at ``url`` (loopback names alike)."""
    wanted = _endpoint(url)
    return any(_endpoint(u.strip()) == wanted for u in urls.split(",") if u.strip())


class Config(BaseModel):
    """Settings shared by every service process."""

    model_config = ConfigDict(frozen=True)

    nats_url: str = DEFAULT_NATS_URL
    nats_user: str | None = None
    nats_password: str | None = None
    nats_creds: str | None = None
    #: The private inbox prefix of ``nats_user`` (``NATS_INBOX_PREFIX``; derived for JidoCode users).
    nats_inbox_prefix: str | None = None
    jido_home: Path = Field(default_factory=default_jido_home)
    js_replicas: int | None = Field(default=None, ge=1, le=5)
    instance: str = Field(default_factory=lambda: f"{socket.gethostname()}-{os.getpid()}")

    @classmethod
    def from_env(cls, **overrides: object) -> Config:
        """The configuration of this process; ``overrides`` win over the environment.

        Without ``NATS_USER``/``NATS_CREDS`` (and no such override), the client
        credentials of the embedded server are used when they belong to the
        server named (or when none is named: then its URL too — the running
        ``up``'s URL from ``up.json`` when it runs, else the one stored with them).
        """
        env = os.environ
        values: dict[str, object] = {
            "nats_url": env.get("NATS_URL") or DEFAULT_NATS_URL,
            "nats_user": env.get("NATS_USER") or None,
            "nats_password": env.get("NATS_PASSWORD") or None,
            "nats_creds": env.get("NATS_CREDS") or None,
            "nats_inbox_prefix": env.get("NATS_INBOX_PREFIX") or None,
            "jido_home": default_jido_home(),
        }
        if env.get("JIDO_JS_REPLICAS"):
            values["js_replicas"] = int(env["JIDO_JS_REPLICAS"])
        if env.get("JIDO_INSTANCE"):
            values["instance"] = env["JIDO_INSTANCE"]
        url_named = bool(env.get("NATS_URL")) or "nats_url" in overrides
        values.update(overrides)
        if not (values.get("nats_user") or values.get("nats_creds")):
            creds = read_credentials(CLIENT_USER)
            running = None if url_named else running_system()
            if running is not None and creds is not None and not same_server(running.url, creds.url):
                creds = None  # not this server's: never send them elsewhere
            if creds is not None and (not url_named or same_server(str(values["nats_url"]), creds.url)):
                values.update(
                    nats_url=values["nats_url"] if url_named else (running.url if running else creds.url),
                    nats_user=creds.user,
                    nats_password=creds.password,
                    nats_inbox_prefix=creds.inbox_prefix,
                )
        return cls.model_validate(values)
