"""Server-sent event streams: one conversation (replayed, then live) and the whole bus (live).

Each SSE message is one CloudEvent: ``id:`` its id, ``event:`` its type,
``data:`` the event as JSON (structured mode). Keep-alive comments are sent
every ``sse_ping_s`` seconds.

**A conversation** (``GET /api/projects/{pid}/conversations/{cid}/events``; an
assistant message's text comes parsed as markdown too, :mod:`.markdown`):
the conversation service's ``replay`` says where its output is stored and
from which stream sequence to read (after ``Last-Event-ID`` or ``?after=``, an
unknown id being 404); an ephemeral *pull* consumer on that stream then
delivers the stored events and the live ones in order. The gateway fetches a
small batch only once the previous one is written to the client, so a slow
reader holds the server's stream back, never the gateway's memory; a reader
that takes nothing for ``sse_send_timeout_s`` is cut off and resumes with
``Last-Event-ID``.

**The bus** (``GET /api/events?project=&conversation=&type=``): a core
subscription to ``jido.>``, each event once (an event travels on several
subjects), filtered. Live events cannot wait, so a viewer may fall at most
``sse_queue`` events behind: past that its stream ends with a final
``event: error`` whose data names the overflow, and it reconnects.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import secrets
from collections import OrderedDict
from collections.abc import AsyncIterator

import anyio
import nats.errors
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy
from sse_starlette import EventSourceResponse, ServerSentEvent
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from jidocode.shared import subjects
from jidocode.shared.bus import Bus
from jidocode.shared.envelope import Envelope, decode
from jidocode.shared.errors import InvalidInput, JidoError
from jidocode.shared.events.conversation import ReplayInfo
from jidocode.shared.prd_stream import start_sequence

from .context import GatewayContext
from .errors import error_response, from_jido_error
from .markdown import ASSISTANT_MESSAGE, markdown_extension

__all__ = [
    "CONSUMER_PREFIX",
    "FETCH_BATCH",
    "BusFilter",
    "Puller",
    "RecentIds",
    "error_event",
    "next_subject",
    "prd_events",
    "prd_sse_event",
    "routes",
    "sse_event",
]

log = logging.getLogger("jidocode.gateway.sse")

#: Events fetched from a conversation's stream at once (the most a viewer holds in memory).
FETCH_BATCH = 64
#: Seconds a pull request waits for new events before it expires and is sent again.
FETCH_WAIT_S = 5.0
#: Event ids the bus stream remembers to send each event once.
RECENT_IDS = 10_000
#: Names of the gateway's SSE consumers start with this (operators can tell them apart).
CONSUMER_PREFIX = "gateway_sse_"
#: Seconds the clean-up of a stream (consumer deletion, unsubscription) may take.
CLEANUP_S = 5.0
#: Seconds an idle ephemeral consumer outlives a viewer that vanished without a goodbye.
CONSUMER_IDLE_S = 60.0


def sse_event(env: Envelope, *, markdown: bool = False) -> ServerSentEvent:
    """One CloudEvent as one SSE message; with ``markdown``, an assistant message also carries
    its text as a markdown tree (``jidomarkdown``, :mod:`.markdown`) for the console."""
    event = env.to_dict()
    if markdown:
        event.update(markdown_extension(event))
    return ServerSentEvent(
        data=json.dumps(event, ensure_ascii=False, separators=(",", ":")), id=env.id, event=env.type
    )


def error_event(error_type: str, message: str) -> ServerSentEvent:
    """The final message of a stream that ends on an error (no id: ``Last-Event-ID`` stays put)."""
    return ServerSentEvent(
        data=json.dumps({"error": {"type": error_type, "message": message}}), event="error"
    )


class RecentIds:
    """The last ``size`` ids seen; :meth:`first` is True only for an id not among them."""

    def __init__(self, size: int = RECENT_IDS) -> None:
        self.size = size
        self._ids: OrderedDict[str, None] = OrderedDict()

    def first(self, event_id: str) -> bool:
        if event_id in self._ids:
            return False
        self._ids[event_id] = None
        if len(self._ids) > self.size:
            self._ids.popitem(last=False)
        return True


class BusFilter:
    """Which bus events a viewer wants: every given criterion must match.

    ``types`` are exact event types, or prefixes ending in ``*`` (``conversation.*``).
    """

    def __init__(
        self, project: str | None = None, conversation: str | None = None, types: tuple[str, ...] = ()
    ) -> None:
        for pattern in types:
            if not pattern or "*" in pattern[:-1] or any(c.isspace() for c in pattern):
                raise InvalidInput(
                    f"invalid type filter {pattern!r}: an event type, or a prefix ending in '*'",
                    details={"type": pattern},
                )
        self.project = project or None
        self.conversation = conversation or None
        self.exact = frozenset(t for t in types if not t.endswith("*"))
        self.prefixes = tuple(t[:-1] for t in types if t.endswith("*"))

    def matches(self, env: Envelope, nats_subject: str = "") -> bool:
        tokens = nats_subject.split(".")
        if self.project and env.project_id != self.project and self.project not in tokens:
            return False
        if self.conversation and env.conversation_id != self.conversation and self.conversation not in tokens:
            return False
        if self.exact or self.prefixes:
            return env.type in self.exact or env.type.startswith(self.prefixes)
        return True


def _stream_response(ctx: GatewayContext, events: AsyncIterator[ServerSentEvent]) -> EventSourceResponse:
    return EventSourceResponse(
        events,
        ping=ctx.settings.sse_ping_s,
        send_timeout=ctx.settings.sse_send_timeout_s,
        headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
    )


# -- one conversation -----------------------------------------------------------------


def _consumer_config(info: ReplayInfo) -> ConsumerConfig:
    start = max(info.start_sequence, 1)
    return ConsumerConfig(
        deliver_policy=DeliverPolicy.ALL if start == 1 else DeliverPolicy.BY_START_SEQUENCE,
        opt_start_seq=None if start == 1 else start,
        ack_policy=AckPolicy.NONE,
        name=f"{CONSUMER_PREFIX}{secrets.token_hex(8)}",
        inactive_threshold=CONSUMER_IDLE_S,
        mem_storage=True,
        num_replicas=1,
    )


def next_subject(stream: str, consumer: str) -> str:
    """JetStream's pull request subject of a consumer (``$JS.API.CONSUMER.MSG.NEXT.<stream>.<consumer>``)."""
    return f"$JS.API.CONSUMER.MSG.NEXT.{stream}.{consumer}"


class Puller:
    """Pull a consumer's messages one by one as they arrive, at most ``batch`` asked for at a time.

    One pull request (``batch`` messages, expiring after ``wait_s``) is
    outstanding while messages are taken; the next is sent once it is used up or
    expired, so the server never sends more than the reader has taken plus ``batch``.
    """

    def __init__(
        self, bus: Bus, stream: str, consumer: str, *, batch: int = FETCH_BATCH, wait_s: float = FETCH_WAIT_S
    ):
        self.bus = bus
        self.stream = stream
        self.consumer = consumer
        self.batch = batch
        self.wait_s = wait_s
        self._outstanding = 0
        self._sub: Subscription | None = None
        self._inbox = ""

    async def start(self) -> None:
        self._inbox = self.bus.nc.new_inbox()
        self._sub = await self.bus.nc.subscribe(self._inbox, pending_msgs_limit=4 * self.batch + 16)

    async def _ask(self) -> None:
        request = {"batch": self.batch, "expires": int(self.wait_s * 1e9)}
        await self.bus.nc.publish(
            next_subject(self.stream, self.consumer), json.dumps(request).encode(), reply=self._inbox
        )
        self._outstanding = self.batch

    async def next(self) -> Msg | None:
        """The next message; ``None`` when none came for a while (time for a keep-alive)."""
        assert self._sub is not None, "start() first"
        if self._outstanding <= 0:
            await self._ask()
        try:
            msg = await self._sub.next_msg(timeout=self.wait_s + 2.0)
        except nats.errors.TimeoutError:
            self._outstanding = 0  # the request was lost (a reconnect): ask again
            return None
        status = (msg.headers or {}).get("Status")
        if status is None:
            self._outstanding -= 1
            return msg
        if (
            status in ("408", "404", "409")
            and "deleted" not in (msg.headers or {}).get("Description", "").lower()
        ):
            self._outstanding = 0  # the request expired (or was replaced): ask again
            return None
        raise nats.errors.Error(
            f"consumer {self.consumer}: {status} {(msg.headers or {}).get('Description', '')}"
        )

    async def close(self) -> None:
        if self._sub is not None:
            with contextlib.suppress(Exception):
                await self._sub.unsubscribe()
        try:
            await self.bus.js.delete_consumer(self.stream, self.consumer)
        except Exception as exc:  # the server drops it after CONSUMER_IDLE_S anyway
            log.info("SSE consumer %s not deleted: %s", self.consumer, exc)


async def conversation_events(request: Request) -> Response:
    ctx: GatewayContext = request.app.state.ctx
    pid, cid = str(request.path_params["pid"]), str(request.path_params["cid"])
    after = request.headers.get("last-event-id") or request.query_params.get("after") or None
    try:
        info = await ctx.conversations(pid).replay(cid, after_id=after)
        config = _consumer_config(info)
        config.filter_subject = info.subject
        consumer = await ctx.bus.js.add_consumer(info.stream, config=config)
    except JidoError as exc:
        return from_jido_error(exc)
    except ValueError as exc:  # an id that is not a valid subject token
        return error_response("invalid_input", str(exc))
    except nats.errors.Error as exc:
        return error_response("service_unavailable", f"the conversation's stream cannot be read now: {exc}")
    puller = Puller(ctx.bus, info.stream, consumer.name)
    await puller.start()
    return _stream_response(ctx, _follow(ctx, puller, info))


async def _follow(ctx: GatewayContext, puller: Puller, info: ReplayInfo) -> AsyncIterator[ServerSentEvent]:
    ctx.streams.open += 1
    try:
        while True:
            try:
                msg = await puller.next()
            except nats.errors.Error as exc:
                ctx.streams.failed += 1
                log.warning("conversation stream %s ended: %s", info.conversation_id, exc)
                yield error_event(
                    "stream_failed", "the event stream was interrupted: reconnect with Last-Event-ID"
                )
                return
            if msg is None:
                continue
            try:
                env = decode(msg.data, msg.headers)
            except JidoError:
                continue
            if env.type == ASSISTANT_MESSAGE:  # parsed beside the loop: a long answer takes ms
                yield await anyio.to_thread.run_sync(functools.partial(sse_event, env, markdown=True))
            else:
                yield sse_event(env)
    finally:
        with (
            anyio.CancelScope(shield=True),
            anyio.move_on_after(CLEANUP_S),
        ):  # the viewer left: we were cancelled
            await puller.close()
        ctx.streams.open -= 1


# -- the whole bus ------------------------------------------------------------------------


async def bus_events(request: Request) -> Response:
    ctx: GatewayContext = request.app.state.ctx
    query = request.query_params
    try:
        flt = BusFilter(query.get("project"), query.get("conversation"), tuple(query.getlist("type")))
    except JidoError as exc:
        return from_jido_error(exc)
    limit = ctx.settings.sse_queue
    queue: asyncio.Queue[Envelope] = asyncio.Queue(maxsize=limit)
    seen = RecentIds()
    overflow = asyncio.Event()

    async def on_msg(msg: Msg) -> None:
        if overflow.is_set():
            return
        try:
            env = decode(msg.data, msg.headers, nats_subject=msg.subject)
        except JidoError:
            return
        if not flt.matches(env, msg.subject) or not seen.first(env.id):
            return
        try:
            queue.put_nowait(env)
        except asyncio.QueueFull:
            overflow.set()

    sub = await ctx.bus.nc.subscribe(subjects.all_subjects(), cb=on_msg)
    await ctx.bus.nc.flush()  # the server has the interest before the first byte goes out

    async def events() -> AsyncIterator[ServerSentEvent]:
        ctx.streams.open += 1
        try:
            while True:
                if overflow.is_set() and queue.empty():
                    ctx.streams.overflowed += 1
                    yield error_event(
                        "overflow",
                        f"this viewer fell more than {limit} events behind the bus: the stream is closed; "
                        "reconnect to go on (a conversation's own stream resumes from Last-Event-ID)",
                    )
                    return
                yield sse_event(await queue.get())
        finally:
            with (
                anyio.CancelScope(shield=True),
                anyio.move_on_after(CLEANUP_S),
                contextlib.suppress(Exception),
            ):
                await sub.unsubscribe()
            ctx.streams.open -= 1

    return _stream_response(ctx, events())


# -- one PRD loop (seed 004) ----------------------------------------------------------------

#: The longest ``Last-Event-ID`` a PRD stream accepts (a seq: a whole number).
MAX_SEQ_DIGITS = 18


def prd_sse_event(env: Envelope, seq: int) -> ServerSentEvent:
    """One PRD loop event as one SSE message: its ``id`` is the PRD's own ``seq`` (gapless, the
    line in ``events.jsonl``), so ``Last-Event-ID`` resumes right after it."""
    return ServerSentEvent(
        data=json.dumps(env.to_dict(), ensure_ascii=False, separators=(",", ":")), id=str(seq), event=env.type
    )


async def prd_events(request: Request) -> Response:
    """``GET /api/projects/{pid}/prds/{name}/events``: a PRD's loop events, stored then live.

    The PRD is read first (an unknown one is 404); an ephemeral pull consumer on
    ``JIDO_PRD`` filtered to the PRD's subjects then delivers its events in order (the
    :class:`Puller`'s backpressure, as for a conversation), skipping those up to the seq of
    ``Last-Event-ID`` (or ``?after=``).
    """
    ctx: GatewayContext = request.app.state.ctx
    pid, name = str(request.path_params["pid"]), str(request.path_params["name"])
    raw = request.headers.get("last-event-id") or request.query_params.get("after") or "0"
    if not raw.isdigit() or len(raw) > MAX_SEQ_DIGITS:
        return error_response(
            "invalid_input",
            f"Last-Event-ID (or ?after=) must be a PRD event's seq, a whole number, got {raw[:40]!r}",
            {"after": raw[:40]},
        )
    try:
        filter_subject = subjects.prd_event_filter(pid, name)
        await ctx.prd(pid).get(name)
        start = await start_sequence(ctx.bus.js, pid, name, int(raw))
        config = ConsumerConfig(
            deliver_policy=DeliverPolicy.ALL if start <= 1 else DeliverPolicy.BY_START_SEQUENCE,
            opt_start_seq=None if start <= 1 else start,
            ack_policy=AckPolicy.NONE,
            name=f"{CONSUMER_PREFIX}{secrets.token_hex(8)}",
            inactive_threshold=CONSUMER_IDLE_S,
            mem_storage=True,
            num_replicas=1,
            filter_subject=filter_subject,
        )
        consumer = await ctx.bus.js.add_consumer(subjects.STREAM_PRD, config=config)
    except JidoError as exc:
        return from_jido_error(exc)
    except ValueError as exc:  # a name that is not a valid subject token
        return error_response("invalid_input", str(exc))
    except nats.errors.Error as exc:
        return error_response("service_unavailable", f"the PRD's event stream cannot be read now: {exc}")
    puller = Puller(ctx.bus, subjects.STREAM_PRD, consumer.name)
    await puller.start()
    return _stream_response(ctx, _follow_prd(ctx, puller, name, int(raw)))


async def _follow_prd(
    ctx: GatewayContext, puller: Puller, name: str, after: int
) -> AsyncIterator[ServerSentEvent]:
    ctx.streams.open += 1
    try:
        while True:
            try:
                msg = await puller.next()
            except nats.errors.Error as exc:
                ctx.streams.failed += 1
                log.warning("PRD stream %s ended: %s", name, exc)
                yield error_event(
                    "stream_failed", "the event stream was interrupted: reconnect with Last-Event-ID"
                )
                return
            if msg is None:
                continue
            try:
                env = decode(msg.data, msg.headers)
                seq = int((env.data or {}).get("seq", 0))
            except (JidoError, TypeError, ValueError, AttributeError):
                continue
            if seq > after:
                after = seq
                yield prd_sse_event(env, seq)
    finally:
        with (
            anyio.CancelScope(shield=True),
            anyio.move_on_after(CLEANUP_S),
        ):  # the viewer left: we were cancelled
            await puller.close()
        ctx.streams.open -= 1


def routes() -> list[Route]:
    return [
        Route("/api/projects/{pid}/conversations/{cid}/events", conversation_events, methods=["GET"]),
        Route("/api/events", bus_events, methods=["GET"]),
        Route("/api/projects/{pid}/prds/{name}/events", prd_events, methods=["GET"]),
    ]
