"""Connecting to NATS, and saying why it failed: what ``Bus.connect`` and the CLI use.

:func:`connect_nats` connects with endless reconnects (or one attempt, ``wait=False``); a failed
first connection keeps what the server said, so :func:`unreachable_message` can tell a stopped
JidoCode ("is JidoCode running?") from a foreign program on the port (:func:`foreign_listener`:
a NATS server that refused our credentials, or something that does not speak NATS; decision
0309). Its log lines are ``jidocode.bus``'s, as before the split.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import nats
import nats.errors
from nats.aio.client import Client

from jidocode.shared.config import Config

__all__ = [
    "PROBE_WAIT",
    "START_HINT",
    "connect_nats",
    "describe_error",
    "foreign_listener",
    "unreachable_message",
]

log = logging.getLogger("jidocode.bus")

START_HINT = "is JidoCode running? Start it with `jidocode up` (or set NATS_URL to a running system)"

#: Seconds :func:`unreachable_message` waits for a listener's first line (a NATS server's ``INFO``).
PROBE_WAIT = 2.0


def describe_error(exc: BaseException) -> str:
    """``exc`` for a log line or a message: its text, or its type when it has none (a timeout)."""
    text = str(exc).strip()
    return text or type(exc).__name__


async def unreachable_message(url: str, exc: BaseException) -> str:
    """Why NATS at ``url`` could not be used, for a person, after a connection failed with ``exc``:
    :func:`foreign_listener`'s message, else how to start JidoCode."""
    foreign = await foreign_listener(url, exc)
    if foreign is not None:
        return foreign
    return f"cannot reach NATS at {url}: {describe_error(exc.__cause__ or exc)}; {START_HINT}"


async def foreign_listener(url: str, exc: BaseException) -> str | None:
    """The message naming what listens at ``url`` when it is not JidoCode's NATS, after a
    connection failed with ``exc``; ``None`` when nothing listens there (or a NATS server that
    did not refuse us).

    Not JidoCode's NATS: a NATS server that refused our credentials (``exc`` or its cause says
    so), or a program that does not speak NATS (its first line, or its silence, says so).
    """
    causes = [exc, *([exc.__cause__] if exc.__cause__ is not None else [])]
    host, port = _first_endpoint(url)
    where = f"{host}:{port}"
    if any(
        isinstance(c, nats.errors.AuthorizationError) or "authorization" in str(c).lower() for c in causes
    ):
        return _foreign(where, "a NATS server there refused JidoCode's credentials (Authorization Violation)")
    spoke = await _first_line(host, port)
    if spoke is None or spoke.startswith(b"INFO "):
        return None
    if not spoke:
        return _foreign(
            where, f"it accepted the connection but sent no NATS greeting within {PROBE_WAIT:g} s"
        )
    return _foreign(where, f"it answered {_printable(spoke)!r} instead of a NATS greeting")


def _foreign(where: str, why: str) -> str:
    return (
        f"something else is listening on {where} (not JidoCode's NATS): {why}. Point NATS_URL at "
        "JidoCode's NATS, or stop that program; `jidocode up` takes another port when 4222 is busy"
    )


def _first_endpoint(url: str) -> tuple[str, int]:
    """The host and port of the first server of a comma-separated NATS ``url``."""
    first = next((u.strip() for u in url.split(",") if u.strip()), url)
    parts = urlsplit(first if "://" in first else f"nats://{first}")
    try:
        port = parts.port or 4222
    except ValueError:
        port = 4222
    return parts.hostname or "127.0.0.1", port


async def _first_line(host: str, port: int) -> bytes | None:
    """What a listener on ``host:port`` says first (``b""``: nothing within :data:`PROBE_WAIT`);
    ``None`` when nothing listens there."""
    try:
        reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), PROBE_WAIT)
    except (OSError, TimeoutError):
        return None
    try:
        return await asyncio.wait_for(reader.readline(), PROBE_WAIT)
    except (OSError, TimeoutError, ValueError):
        return b""
    finally:
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()


def _printable(data: bytes, limit: int = 60) -> str:
    """The start of ``data`` as plain printable text (a foreign program's bytes are untrusted)."""
    text = data.decode("ascii", errors="replace").strip()
    return "".join(ch if ch.isprintable() else "?" for ch in text)[:limit]


async def connect_nats(config: Config, name: str, *, wait: bool = True, **options: Any) -> Client:
    """Connect nats-py with our defaults: credentials and inbox prefix from config, reconnect forever.

    ``wait=True`` (services) keeps trying until a server answers; ``wait=False``
    (CLI commands) fails after one round over the servers, then, once connected,
    reconnects forever like a service.
    """

    attempts = _Attempts()

    async def _error_cb(exc: Exception) -> None:
        if not attempts.connected:
            # a failed attempt, which nats.connect retries (or raises): not an error yet
            attempts.failures.append(exc)
            log.info("nats (%s): connection attempt failed: %s", name, describe_error(exc))
            return
        log.warning("nats error (%s): %s", name, describe_error(exc))

    async def _disconnected_cb() -> None:
        log.info("nats disconnected (%s)", name)

    async def _reconnected_cb() -> None:
        log.info("nats reconnected (%s)", name)

    opts: dict[str, Any] = {
        "servers": [s.strip() for s in config.nats_url.split(",") if s.strip()],
        "name": f"jidocode-{name}",
        "max_reconnect_attempts": -1 if wait else 1,
        "reconnect_time_wait": 0.5,
        "connect_timeout": 2,
        "allow_reconnect": True,
        "error_cb": _error_cb,
        "disconnected_cb": _disconnected_cb,
        "reconnected_cb": _reconnected_cb,
    }
    if config.nats_creds:
        opts["user_credentials"] = config.nats_creds
    elif config.nats_user:
        opts["user"] = config.nats_user
        opts["password"] = config.nats_password or ""
    inbox = _inbox_prefix(config)
    if inbox:
        opts["inbox_prefix"] = inbox
    opts.update(options)
    try:
        nc = await nats.connect(**opts)
    except nats.errors.NoServersError as exc:
        if attempts.failures:  # what the server did say: unreachable_message() reads it
            raise exc from _most_telling(attempts.failures)
        raise
    attempts.connected = True
    if not wait and "max_reconnect_attempts" not in options:
        nc.options["max_reconnect_attempts"] = -1  # connected: from now on, ride out restarts
    return nc


def _most_telling(failures: list[Exception]) -> Exception:
    """The failure that says most about the server: a refusal of our credentials (a later attempt
    may only see the connection reset that followed it), else the last one."""
    refused = [
        f
        for f in failures
        if isinstance(f, nats.errors.AuthorizationError) or "authorization" in str(f).lower()
    ]
    return refused[0] if refused else failures[-1]


@dataclass
class _Attempts:
    """A connection's failed attempts until it first connects (then its errors are errors)."""

    connected: bool = False
    failures: list[Exception] = field(default_factory=list)


def _inbox_prefix(config: Config) -> str | None:
    """The user's private inbox prefix: configured, else ``NATS_INBOX_PREFIX``, else derived for a
    JidoCode user (whose NATS permissions allow only ``_INBOX_<user>.>`` as its inbox)."""
    inbox = config.nats_inbox_prefix or os.environ.get("NATS_INBOX_PREFIX")
    if inbox:
        return inbox
    from jidocode.shared import nats_permissions  # its user tables: only a named service user needs them

    if config.nats_user in nats_permissions.USERS:
        return nats_permissions.inbox_prefix(config.nats_user)
    return None
