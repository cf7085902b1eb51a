"""A JidoCode system on a NATS server with the embedded users, as ``jidocode up`` runs it.

The server is started from the same pieces ``jidocode up`` uses (:func:`ensure_credentials`,
``NatsServer(users=…)``), and each service runs in this process on its own NATS user; the test
talks to it as the ``client`` user, as the CLI and the SDK do.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import nats
import nats.errors
from nats.aio.client import Client

from jidocode.services.registry import SERVICES, load_serve
from jidocode.shared import nats_permissions as perms
from jidocode.shared import subjects
from jidocode.shared.bus import Bus
from jidocode.shared.clients import EngineClient, ToolsClient
from jidocode.shared.config import Config
from jidocode.shared.envelope import Envelope
from jidocode.shared.events.tools import ToolCallMeta, ToolResult
from jidocode.shared.natsserver import NatsServer, ensure_credentials, free_port
from tests.helpers import wait_for_services
from tests.integration.tools.support import failure as failure  # re-exported for the security tests


@dataclass
class SecureSystem:
    url: str
    data_home: Path
    jido_home: Path
    passwords: dict[str, str]
    client: Bus
    stop: asyncio.Event = field(default_factory=asyncio.Event)

    def config(self, user: str, **update: Any) -> Config:
        """The configuration of ``user`` (a service or ``client``)."""
        return Config(
            nats_url=self.url,
            nats_user=user,
            nats_password=self.passwords[user],
            nats_inbox_prefix=perms.inbox_prefix(user),
            jido_home=self.jido_home,
            instance=user,
        ).model_copy(update=update)

    async def start_project(self, root: Path, settings: dict[str, Any] | None = None) -> str:
        if settings is not None:
            (root / ".jido").mkdir(parents=True, exist_ok=True)
            (root / ".jido" / "settings.json").write_text(json.dumps(settings))
        return (await EngineClient(self.client).start_project(str(root), timeout=10)).project_id

    async def run(
        self,
        project_id: str,
        name: str,
        args: dict[str, Any],
        *,
        request_id: str,
        conversation_id: str | None = None,
        timeout: float = 30.0,
    ) -> ToolResult:
        meta = ToolCallMeta(request_id=request_id, conversation_id=conversation_id)
        return await ToolsClient(self.client, project_id).run(
            name, args, meta=meta, timeout=timeout, conversation_id=conversation_id
        )


@dataclass
class Watcher:
    """Connection errors of a raw nats-py client (the server's permission violations)."""

    nc: Client
    errors: asyncio.Queue[Exception]

    async def next_error(self, timeout: float = 10.0) -> str:
        return str(await asyncio.wait_for(self.errors.get(), timeout))


@contextlib.asynccontextmanager
async def connect_raw(
    url: str, user: str | None = None, password: str | None = None
) -> AsyncIterator[Watcher]:
    """A plain nats-py connection as ``user`` (or anonymous), collecting the server's errors."""
    errors: asyncio.Queue[Exception] = asyncio.Queue()

    async def _error_cb(exc: Exception) -> None:
        await errors.put(exc)

    options: dict[str, Any] = {"allow_reconnect": False, "connect_timeout": 5, "error_cb": _error_cb}
    if user is not None:
        options.update(user=user, password=password, inbox_prefix=perms.inbox_prefix(user))
    nc = await nats.connect(url, **options)
    try:
        yield Watcher(nc, errors)
    finally:
        with contextlib.suppress(nats.errors.Error):
            await nc.close()


@contextlib.asynccontextmanager
async def secure_system(
    tmp: Path,
    jido_home: Path,
    names: Iterable[str] = SERVICES,
) -> AsyncIterator[SecureSystem]:
    """Start the server with the embedded users and ``names`` as in-process services."""
    data_home = tmp / "data"
    port = free_port()
    url = f"nats://127.0.0.1:{port}"
    passwords = ensure_credentials(url, data_home)
    server = NatsServer(store_dir=tmp / "js", port=port, sync="default", users=passwords).start()
    names = tuple(names)
    stop = asyncio.Event()
    client: Bus | None = None
    tasks: list[asyncio.Task[None]] = []
    try:
        for name in names:
            cfg = Config(
                nats_url=url,
                nats_user=name,
                nats_password=passwords[name],
                nats_inbox_prefix=perms.inbox_prefix(name),
                jido_home=jido_home,
                instance=name,
            )
            tasks.append(asyncio.create_task(load_serve(name)(cfg, stop), name=f"service-{name}"))
        client_cfg = Config(
            nats_url=url,
            nats_user="client",
            nats_password=passwords["client"],
            nats_inbox_prefix=perms.inbox_prefix("client"),
            jido_home=jido_home,
            instance="tests",
        )
        await wait_for_services(client_cfg, names, timeout=30)
        client = await Bus.connect(client_cfg, "client")
        yield SecureSystem(url, data_home, jido_home, passwords, client, stop)
    finally:
        stop.set()
        if client is not None:
            await client.close()
        await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), 30)
        server.stop()


class Seen:
    """Envelopes seen on a subject filter; wait for one matching a predicate (no sleeps)."""

    def __init__(self) -> None:
        self.items: list[Envelope] = []
        self._changed = asyncio.Event()

    async def on(self, env: Envelope) -> None:
        self.items.append(env)
        self._changed.set()

    def count(self, pred: Callable[[Envelope], bool]) -> int:
        return sum(1 for e in self.items if pred(e))

    async def wait(self, pred: Callable[[Envelope], bool], timeout: float = 20.0) -> Envelope:
        async def loop() -> Envelope:
            while True:
                for env in self.items:
                    if pred(env):
                        return env
                self._changed.clear()
                await self._changed.wait()

        return await asyncio.wait_for(loop(), timeout)


async def watch(bus: Bus, subject: str) -> Seen:
    seen = Seen()
    await bus.subscribe(subject, seen.on)
    await bus.nc.flush()
    return seen


def signals(bus: Bus) -> Any:
    return watch(bus, subjects.signal_filter())
