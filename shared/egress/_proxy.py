"""The egress proxy of a tool-runner replica: HTTP ``CONNECT`` and plain HTTP, one decision each.

One :class:`EgressProxy` per replica listens on a unix socket (:attr:`~EgressProxy.unix_path`,
which the bubblewrap sandbox bind-mounts and bridges to a loopback port inside) and on a
loopback TCP port (:attr:`~EgressProxy.tcp_port`, the only one a Landlock sandbox may
connect to). A call gets a :class:`~._scope.Pass` for as long as it runs (:meth:`EgressProxy.grant`);
each connection names its pass by the token of its proxy URL.

For each connection: the head is read (64 KiB at most, 30 s), the token looked up (407
without a live one), the destination decided (:func:`~._admission.admit`), a ``tool.network``
event published with the outcome, then the proxy connects to a checked address and relays
bytes both ways; when an allowed connection closes, a second event gives the bytes moved. A
pass closed at the call's end closes its connections.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import Final, Literal

from jidocode.shared.events.tools import ToolNetwork
from jidocode.shared.policy import Decision

from ._admission import Admission, admit
from ._resolver import Resolver, system_resolver
from ._scope import CallScope, Pass
from ._wire import MAX_HEAD, Request, answer, origin_head, parse_head, split_authority

__all__ = ["EgressProxy", "EventSink"]

log = logging.getLogger("jidocode.tool_runner.egress")

#: Where the decisions go (the tool runner publishes them on the bus).
EventSink = Callable[[ToolNetwork, CallScope], Awaitable[None]]

_HEAD_TIMEOUT_S: Final = 30.0
_CONNECT_TIMEOUT_S: Final = 15.0
#: Once one direction of a tunnel ended, how long the other may go on alone.
_HALF_CLOSED_S: Final = 30.0
_CHUNK: Final = 64 * 1024

Via = Literal["connect", "http"]


@dataclass
class _Counter:
    up: int = 0
    down: int = 0


@dataclass
class _Live:
    """A pass in force: its scope and the client connections made with it."""

    scope: CallScope
    writers: set[asyncio.StreamWriter] = field(default_factory=set)
    asking: dict[str, asyncio.Future[bool]] = field(default_factory=dict)


async def _no_sink(event: ToolNetwork, scope: CallScope) -> None:
    return None


class EgressProxy:
    """The proxy: start it with :meth:`start`, hand out passes with :meth:`grant`, :meth:`close` it."""

    def __init__(
        self,
        *,
        resolver: Resolver = system_resolver,
        runtime: Iterable[tuple[str, int]] = (),
        on_event: EventSink = _no_sink,
    ) -> None:
        self.resolver = resolver
        #: The runtime's own ``(address, port)`` endpoints (NATS, the gateway): always refused.
        self.runtime = tuple(runtime)
        self.on_event = on_event
        self.unix_path = ""
        self.tcp_port = 0
        self._dir: str | None = None
        self._servers: list[asyncio.Server] = []
        self._passes: dict[str, _Live] = {}
        self._tasks: set[asyncio.Task[None]] = set()

    @classmethod
    async def start(
        cls,
        *,
        resolver: Resolver = system_resolver,
        runtime: Iterable[tuple[str, int]] = (),
        on_event: EventSink = _no_sink,
        socket_dir: str | None = None,
    ) -> EgressProxy:
        """Listen on a fresh unix socket (in ``socket_dir``, else a private temporary directory)
        and on an ephemeral loopback TCP port."""
        proxy = cls(resolver=resolver, runtime=runtime, on_event=on_event)
        proxy._dir = tempfile.mkdtemp(prefix="jido-egress-", dir=socket_dir)
        proxy.unix_path = os.path.join(proxy._dir, "proxy.sock")
        unix = await asyncio.start_unix_server(proxy._serve, path=proxy.unix_path, limit=MAX_HEAD)
        os.chmod(proxy.unix_path, 0o600)
        tcp = await asyncio.start_server(proxy._serve, host="127.0.0.1", port=0, limit=MAX_HEAD)
        proxy._servers = [unix, tcp]
        proxy.tcp_port = int(tcp.sockets[0].getsockname()[1])
        return proxy

    # -- passes ----------------------------------------------------------------------

    def open_pass(self, scope: CallScope) -> Pass:
        """A new token for ``scope``'s call, in force until :meth:`close_pass`."""
        token = secrets.token_urlsafe(24)
        self._passes[token] = _Live(scope)
        return Pass(token=token, tcp_port=self.tcp_port, unix_path=self.unix_path)

    def close_pass(self, token: str) -> None:
        """End a pass: its token no longer works and its open connections are closed."""
        live = self._passes.pop(token, None)
        if live is None:
            return
        for writer in list(live.writers):
            writer.close()
        for fut in live.asking.values():
            if not fut.done():
                fut.cancel()

    @contextlib.asynccontextmanager
    async def grant(self, scope: CallScope) -> AsyncIterator[Pass]:
        """A pass for the duration of the ``async with`` (the call)."""
        issued = self.open_pass(scope)
        try:
            yield issued
        finally:
            self.close_pass(issued.token)

    async def close(self) -> None:
        for token in list(self._passes):
            self.close_pass(token)
        for server in self._servers:
            server.close()
        for server in self._servers:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(server.wait_closed(), 5.0)
        for task in list(self._tasks):
            task.cancel()
        if self._dir is not None:
            with contextlib.suppress(OSError):
                os.unlink(self.unix_path)
            with contextlib.suppress(OSError):
                os.rmdir(self._dir)

    # -- one connection --------------------------------------------------------------

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), _HEAD_TIMEOUT_S)
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError, ConnectionError):
            writer.close()
            return
        request = parse_head(head)
        if isinstance(request, str):
            await _refuse(writer, 400, request)
            return
        live = self._passes.get(request.token or "")
        if live is None:
            await _refuse(writer, 407, "no valid token: use the proxy URL of your environment", auth=True)
            return
        live.writers.add(writer)
        try:
            await self._route(request, live, reader, writer)
        finally:
            live.writers.discard(writer)
            writer.close()

    async def _route(
        self, request: Request, live: _Live, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        if request.method == "CONNECT":
            where = split_authority(request.target)
            if isinstance(where, str):
                await _refuse(writer, 400, where)
                return
            await self._tunnel(live, where[0], where[1], b"", "connect", reader, writer)
            return
        target = origin_head(request)
        if isinstance(target, str):
            await _refuse(writer, 400, target)
            return
        await self._tunnel(live, target[0], target[1], target[2], "http", reader, writer)

    async def _tunnel(
        self,
        live: _Live,
        host: str,
        port: int,
        first: bytes,
        via: Via,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
    ) -> None:
        scope = live.scope
        verdict = await admit(_asking(live, scope), host, port, resolver=self.resolver, runtime=self.runtime)
        if not verdict.allowed:
            self._emit(scope, verdict, port, via, "denied")
            await _refuse(writer, 403, f"jidocode egress proxy refused {host}:{port}: {verdict.reason}")
            return
        upstream = await _connect(verdict.addresses, port)
        if isinstance(upstream, str):
            self._emit(scope, verdict, port, via, "denied", reason=upstream)
            await _refuse(writer, 502, f"jidocode egress proxy could not reach {host}:{port}: {upstream}")
            return
        up_reader, up_writer, address = upstream
        self._emit(scope, verdict, port, via, "allowed", address=address)
        count = _Counter()
        try:
            if via == "connect":
                writer.write(b"HTTP/1.1 200 Connection Established\r\n\r\n")
            else:
                up_writer.write(first)
                count.up += len(first)
            await _relay(reader, writer, up_reader, up_writer, count, plain=via == "http")
        finally:
            up_writer.close()
            self._emit(scope, verdict, port, via, "closed", address=address, count=count)

    def _emit(
        self,
        scope: CallScope,
        verdict: Admission,
        port: int,
        via: Via,
        outcome: Literal["allowed", "denied", "closed"],
        *,
        reason: str | None = None,
        address: str | None = None,
        count: _Counter | None = None,
    ) -> None:
        event = ToolNetwork(
            project_id=scope.project_id,
            request_id=scope.request_id,
            conversation_id=scope.conversation_id,
            host=verdict.host,
            port=port,
            outcome=outcome,
            reason=reason or ("" if verdict.allowed else verdict.reason),
            address=address,
            via=via,
            bytes_up=count.up if count else 0,
            bytes_down=count.down if count else 0,
        )
        task = asyncio.get_running_loop().create_task(self._publish(event, scope))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _publish(self, event: ToolNetwork, scope: CallScope) -> None:
        try:
            await self.on_event(event, scope)
        except Exception:  # an event lost must not break the connection; said in the log
            log.warning("tool.network event of %s not published", scope.request_id, exc_info=True)


def _asking(live: _Live, scope: CallScope) -> CallScope:
    """``scope`` whose questions are asked once per host while one is pending (a package manager
    opens many connections to the same host at once: the user answers once)."""
    ask = scope.ask
    if ask is None:
        return scope

    async def once(host: str, port: int, decision: Decision) -> bool:
        pending = live.asking.get(host)
        if pending is None:
            pending = asyncio.ensure_future(ask(host, port, decision))
            live.asking[host] = pending
        try:
            return await asyncio.shield(pending)
        except Exception:  # the question could not be asked (quota, bus): refused
            log.warning("could not ask about %s", host, exc_info=True)
            return False

    return replace(scope, ask=once)


async def _refuse(writer: asyncio.StreamWriter, status: int, text: str, *, auth: bool = False) -> None:
    with contextlib.suppress(ConnectionError):
        writer.write(answer(status, text, authenticate=auth))
        await writer.drain()
    writer.close()


async def _connect(
    addresses: tuple[str, ...], port: int
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter, str] | str:
    """A connection to the first of the checked ``addresses`` that answers, or why none did."""
    problems: list[str] = []
    for address in addresses:
        try:
            reader, writer = await asyncio.wait_for(
                asyncio.open_connection(address, port, limit=_CHUNK), _CONNECT_TIMEOUT_S
            )
        except (OSError, TimeoutError) as exc:
            problems.append(f"{address}: {exc or 'timed out'}")
            continue
        return reader, writer, address
    return "; ".join(problems) or "no address"


async def _pump(
    src: asyncio.StreamReader, dst: asyncio.StreamWriter, count: _Counter, direction: str
) -> None:
    """Copy ``src`` to ``dst`` until end of stream, then half-close ``dst``."""
    while chunk := await src.read(_CHUNK):
        dst.write(chunk)
        await dst.drain()
        if direction == "up":
            count.up += len(chunk)
        else:
            count.down += len(chunk)
    if dst.can_write_eof():
        with contextlib.suppress(OSError):
            dst.write_eof()


async def _relay(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    up_reader: asyncio.StreamReader,
    up_writer: asyncio.StreamWriter,
    count: _Counter,
    *,
    plain: bool,
) -> None:
    """Bytes both ways until both ends finished (a plain request: until the origin's answer ended)."""
    up = asyncio.ensure_future(_pump(reader, up_writer, count, "up"))
    down = asyncio.ensure_future(_pump(up_reader, writer, count, "down"))
    try:
        done, _ = await asyncio.wait({up, down}, return_when=asyncio.FIRST_COMPLETED)
        if down not in done:
            await asyncio.wait({down})  # the client is done sending: the origin may still answer
        elif not plain:
            await asyncio.wait({up}, timeout=_HALF_CLOSED_S)
    finally:
        for task in (up, down):
            task.cancel()
        for task in (up, down):
            with contextlib.suppress(asyncio.CancelledError, OSError, ConnectionError):
                await task
