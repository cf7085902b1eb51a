"""The bus client every service and client uses: nats-py plus our envelope.

``Bus`` connects with endless reconnects, emits catalogue events as
CloudEvents on the subject their type and channel give (:meth:`Bus.emit`),
calls commands and returns the reply model each command declares
(:meth:`Bus.call`; an error reply becomes its typed exception, missing
responders :class:`ServiceUnavailable`, not a timeout), publishes to
JetStream with ``Nats-Msg-Id`` and retries, creates streams and KV buckets
idempotently, and drains on close.

Services and clients do not call :meth:`Bus.call` with hand-built subjects:
the typed clients in ``shared.clients`` do, from the endpoint table.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar, cast

import nats
import nats.errors
import nats.js.errors
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from nats.js import JetStreamContext
from nats.js.api import KeyValueConfig, StreamConfig
from nats.js.kv import KeyValue
from pydantic import ValidationError

from jidocode.shared import subjects, telemetry
from jidocode.shared.config import Config
from jidocode.shared.envelope import (
    EXTENSIONS,
    Envelope,
    decode,
    decode_reply,
    encode,
    encode_event,
    error_envelope,
)
from jidocode.shared.errors import (
    ErrorInfo,
    InvalidEnvelope,
    JidoError,
    NotFound,
    RequestTimeout,
    ServiceUnavailable,
    from_info,
)
from jidocode.shared.events import ERROR_TYPE, Command, EventModel, R
from jidocode.shared.nats_connect import (
    START_HINT,
    connect_nats,
    describe_error,
    foreign_listener,
    unreachable_message,
)

if TYPE_CHECKING:
    from opentelemetry.trace import Tracer

    from jidocode.shared.telemetry.export import BusSpanProcessor

__all__ = [
    "Bus",
    "EnvelopeHandler",
    "connect_nats",
    "describe_error",
    "error_payload",
    "foreign_listener",
    "gather",
    "subject_of",
    "unreachable_message",
]

log = logging.getLogger("jidocode.bus")

T = TypeVar("T")

EnvelopeHandler = Callable[[Envelope], Awaitable[None]]

#: JetStream failures worth retrying with the same message id.
_JS_TRANSIENT = (
    nats.errors.TimeoutError,
    nats.errors.NoRespondersError,
    nats.js.errors.NoStreamResponseError,
    nats.js.errors.ServiceUnavailableError,
)

#: Pauses before asking again when the server reports no responder.
_NO_RESPONDER_RETRIES = (0.025, 0.075)
#: Reconnect listeners running (kept until they end).
_RECONNECT_TASKS: set[asyncio.Future[None]] = set()


class Bus:
    """A connected bus client. Make one with :meth:`connect`."""

    def __init__(self, nc: Client, *, source: str, replicas: int = 1) -> None:
        self.nc = nc
        self.js: JetStreamContext = nc.jetstream()
        self.source = source
        self.replicas = replicas
        self._kv: dict[str, KeyValue] = {}
        #: Called (each in a task of its own) when the connection comes back after a loss.
        self._on_reconnect: list[Callable[[], Awaitable[None]]] = []
        #: This connection's tracer while tracing is on (``telemetry``); ``None`` costs nothing.
        self.tracer: Tracer | None = None
        self._span_export: BusSpanProcessor | None = None
        if telemetry.enabled():
            self._start_tracing()

    def _start_tracing(self) -> None:
        """A tracer naming this service; its finished spans go on ``jido.trace.…`` too."""
        from jidocode.shared.telemetry.export import BusSpanProcessor

        service = self.source.split("/", 1)[0]
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # made outside a loop: spans go to the configured exporters only
            loop = None
        if loop is not None:
            self._span_export = BusSpanProcessor(service, self._publish_spans, loop=loop)
        extra = [self._span_export] if self._span_export is not None else []
        self.tracer = telemetry.tracer(service, instance=self.source, extra=extra)

    async def _publish_spans(self, subject: str, event: EventModel) -> None:
        if not self.nc.is_closed:
            await self.nc.publish(subject, encode(Envelope.new(event, source=self.source))[0])

    @classmethod
    async def connect(cls, config: Config, name: str, *, wait: bool = True, **options: Any) -> Bus:
        """Connect as service ``name``; ``source`` of its events is ``<name>/<instance>``.

        ``wait=False`` raises :class:`ServiceUnavailable` at once when no server answers.
        Tracing is switched on here as the ``OTEL_*`` variables say (once per process).
        """
        telemetry.setup_from_env()
        made: list[Bus] = []

        async def reconnected() -> None:
            log.info("nats reconnected (%s)", name)
            if made:
                made[0].reconnected()

        options.setdefault("reconnected_cb", reconnected)
        try:
            nc = await connect_nats(config, name, wait=wait, **options)
        except (nats.errors.NoServersError, OSError) as exc:
            raise ServiceUnavailable(
                await unreachable_message(config.nats_url, exc), details={"nats_url": config.nats_url}
            ) from None
        made.append(cls(nc, source=f"{name}/{config.instance}", replicas=config.js_replicas or 1))
        return made[0]

    def on_reconnect(self, listener: Callable[[], Awaitable[None]]) -> None:
        """Call ``listener`` whenever the connection comes back after a loss (a restarted
        server: what lived only in it, such as an ephemeral consumer, may be gone)."""
        self._on_reconnect.append(listener)

    def reconnected(self) -> None:
        """The connection came back: start every listener of :meth:`on_reconnect`."""
        for listener in self._on_reconnect:
            task = asyncio.ensure_future(listener())
            _RECONNECT_TASKS.add(task)
            task.add_done_callback(_RECONNECT_TASKS.discard)

    # -- publishing -----------------------------------------------------------

    def envelope(self, event: EventModel, **ext: Any) -> Envelope:
        """Wrap ``event`` with this client as ``source`` (``ext``: project_id=…, correlation_id=…).

        While tracing is on, the current span goes along as ``traceparent``/``tracestate``.
        """
        env = Envelope.new(event, source=self.source, **ext)
        if self.tracer is not None and ext.get("traceparent") is None:
            from jidocode.shared.telemetry.spans import inject

            carrier: dict[str, str] = {}
            inject(carrier)
            if carrier:
                env = env.with_extensions(**carrier)
        return env

    async def publish(self, subject: str, event: EventModel, **ext: Any) -> Envelope:
        env = self.envelope(event, **ext)
        await self.publish_envelope(subject, env)
        return env

    async def emit(self, event: EventModel, **ext: Any) -> Envelope:
        """Publish ``event`` on the subject its channel and type give (see :func:`subject_of`).

        A conversation event needs ``project_id`` and ``conversation_id`` in ``ext``.
        """
        subject = subject_of(event, ext.get("project_id"), ext.get("conversation_id"))
        return await self.publish(subject, event, **ext)

    async def publish_envelope(self, subject: str, env: Envelope) -> None:
        payload, headers = encode(env)
        await self.nc.publish(subject, payload, headers=headers)

    async def js_publish(
        self,
        subject: str,
        event: EventModel | Envelope,
        *,
        timeout: float = 2.0,
        deadline: float = 20.0,
        **ext: Any,
    ) -> int:
        """Publish to JetStream with ``Nats-Msg-Id`` = event id, retrying until ``deadline`` seconds.

        A publish that timed out may still have been stored: retrying with the
        same message id lets the server drop the duplicate. Also retried: no
        stream answering (a leader election in a cluster, a restarting server)
        and JetStream being temporarily unavailable. Returns the stream sequence.
        """
        env = event if isinstance(event, Envelope) else self.envelope(event, **ext)
        if self.tracer is None:
            return await self._js_publish(subject, env, timeout, deadline)
        from jidocode.shared.telemetry.spans import SpanKind, span

        attrs = {
            "messaging.system": "nats",
            "messaging.destination.name": subject,
            "jido.event_type": env.type,
        }
        with span(self.tracer, "jetstream publish", kind=SpanKind.PRODUCER, attributes=attrs):
            return await self._js_publish(subject, env, timeout, deadline)

    async def _js_publish(self, subject: str, env: Envelope, timeout: float, deadline: float) -> int:
        payload, headers = encode(env, jetstream=True)
        delay = 0.1
        give_up = time.monotonic() + deadline
        attempt = 0
        while True:
            attempt += 1
            try:
                ack = await self.js.publish(subject, payload, timeout=timeout, headers=headers)
                return int(ack.seq)
            except _JS_TRANSIENT as exc:
                if time.monotonic() + delay >= give_up:
                    raise RequestTimeout(
                        f"JetStream did not acknowledge {env.type} on {subject} after {attempt} attempts "
                        f"in {deadline:g} s ({type(exc).__name__})",
                        details={"subject": subject, "id": env.id, "attempts": attempt},
                    ) from None
                log.warning(
                    "jetstream publish of %s failed (%s, attempt %d), retrying",
                    env.id,
                    type(exc).__name__,
                    attempt,
                )
                from jidocode.shared.telemetry.metrics import JS_PUBLISH_RETRIES

                JS_PUBLISH_RETRIES.labels(self.source.split("/", 1)[0]).inc()
                await asyncio.sleep(delay)
                delay = min(delay * 2, 2.0)

    # -- request/reply --------------------------------------------------------

    def _request_payload(self, event: EventModel, ext: dict[str, Any]) -> bytes:
        """The encoded request: ``ext`` as extensions, and the current span's context while tracing."""
        extensions = {EXTENSIONS[k]: v for k, v in ext.items() if v is not None} if ext else {}
        if self.tracer is not None and "traceparent" not in extensions:
            from jidocode.shared.telemetry.spans import inject

            inject(extensions)
        return encode_event(event, source=self.source, extensions=extensions)[1]

    async def _failed_request(self, exc: Exception, subject: str, payload: bytes, timeout: float) -> Msg:
        """After a first request that failed with ``exc``: ask again on "no responders",
        else (and when asking again fails) raise the typed error."""
        try:
            if isinstance(exc, nats.errors.NoRespondersError):
                return await self._ask_again(subject, payload, timeout)
        except nats.errors.NoRespondersError:
            pass
        except nats.errors.TimeoutError:
            exc = nats.errors.TimeoutError()
        if isinstance(exc, nats.errors.TimeoutError):
            raise RequestTimeout(
                f"no answer on {subject} within {timeout:g} s",
                details={"subject": subject, "timeout": timeout},
            ) from None
        unknown = unknown_endpoint(subject)
        if unknown is not None:  # nobody ever serves it: not a system that is down
            raise NotFound(
                f"no service answers on {subject}: {unknown}", details={"subject": subject}
            ) from None
        raise ServiceUnavailable(
            f"no service answers on {subject}: {START_HINT}", details={"subject": subject}
        ) from None

    async def _ask_again(self, subject: str, payload: bytes, timeout: float) -> Msg:
        """After a "no responders": ``nc.request`` twice more (within 100 ms).

        Seen on nats-server: a subscription that was registered and flushed can,
        rarely (about 1 in 100 requests right after it), still get "no responders"
        from a server under load. A service that is really absent costs 100 ms more.
        """
        for pause in _NO_RESPONDER_RETRIES[:-1]:
            await asyncio.sleep(pause)
            try:
                return await self.nc.request(subject, payload, timeout=timeout)
            except nats.errors.NoRespondersError:
                pass
        await asyncio.sleep(_NO_RESPONDER_RETRIES[-1])
        return await self.nc.request(subject, payload, timeout=timeout)

    async def call(self, subject: str, command: Command[R], *, timeout: float = 5.0, **ext: Any) -> R:
        """Send ``command``; return its reply as the model the command declares.

        Raises the typed error an error reply carries, :class:`ServiceUnavailable`
        when nobody serves ``subject``, :class:`RequestTimeout`, or
        :class:`InvalidEnvelope` when the reply is not the declared type.
        While tracing is on, the call is a client span whose context the request carries.
        """
        if self.tracer is not None:
            return await self._traced_call(subject, command, timeout, ext)
        # Written out (no helper coroutines): this is every request's path.
        payload = self._request_payload(command, ext)
        try:
            msg = await self.nc.request(subject, payload, timeout=timeout)
        except (nats.errors.NoRespondersError, nats.errors.TimeoutError) as exc:
            msg = await self._failed_request(exc, subject, payload, timeout)
        return _typed_reply(subject, command, msg.data)

    async def _traced_call(self, subject: str, command: Command[R], timeout: float, ext: dict[str, Any]) -> R:
        """:meth:`call` as a client span, whose context the request carries."""
        from jidocode.shared.telemetry.spans import SpanKind, span

        attrs = {
            "messaging.system": "nats",
            "messaging.destination.name": subject,
            "rpc.method": command.type,
        }
        with span(self.tracer, f"request {command.type}", kind=SpanKind.CLIENT, attributes=attrs):
            payload = self._request_payload(command, ext)
            try:
                msg = await self.nc.request(subject, payload, timeout=timeout)
            except (nats.errors.NoRespondersError, nats.errors.TimeoutError) as exc:
                msg = await self._failed_request(exc, subject, payload, timeout)
            return _typed_reply(subject, command, msg.data)

    # -- subscriptions --------------------------------------------------------

    async def subscribe(self, subject: str, handler: EnvelopeHandler, *, queue: str = "") -> Subscription:
        """Subscribe with a handler of decoded envelopes. Invalid messages are logged
        (and answered with an error event when they expect a reply), never raised."""

        async def _cb(msg: Msg) -> None:
            try:
                env = decode(msg.data, msg.headers, nats_subject=msg.subject)
            except JidoError as exc:
                log.warning("rejected message on %s: %s", msg.subject, exc.message)
                if msg.reply:
                    await self.reply_error(msg.reply, exc)
                return
            try:
                await handler(env)
            except Exception:
                log.exception("handler for %s failed on %s", subject, env.type)

        return await self.nc.subscribe(subject, queue=queue, cb=_cb)

    async def reply_error(self, reply_to: str, error: JidoError, **ext: Any) -> None:
        await self.nc.publish(reply_to, error_payload(self.source, error, **ext))

    # -- JetStream helpers ----------------------------------------------------

    async def ensure_stream(
        self, name: str, subjects: Sequence[str], *, deadline: float = 30.0, **config: Any
    ) -> None:
        """Create the stream, or update it when it exists with other settings.

        Retried until ``deadline`` while JetStream is not ready (a young or
        re-electing cluster answers with timeouts or "unavailable").
        """
        cfg = StreamConfig(name=name, subjects=list(subjects), num_replicas=self.replicas, **config)

        async def _ensure() -> None:
            try:
                await self.js.add_stream(cfg)
            except nats.js.errors.BadRequestError as exc:
                if exc.err_code != 10058:  # stream name already in use with a different configuration
                    raise
                await self.js.update_stream(cfg)

        await _retry_js(f"stream {name}", _ensure, deadline)

    async def kv(self, bucket: str, *, deadline: float = 30.0, **config: Any) -> KeyValue:
        """The KV bucket, created with ``config`` (and our replica count) if missing.

        Retried until ``deadline`` while JetStream is not ready, like :meth:`ensure_stream`.
        """
        cached = self._kv.get(bucket)
        if cached is not None:
            return cached

        async def _open() -> KeyValue:
            try:
                return await self.js.key_value(bucket)
            except nats.js.errors.BucketNotFoundError:
                try:
                    return await self.js.create_key_value(
                        KeyValueConfig(bucket=bucket, replicas=self.replicas, **config)
                    )
                except nats.js.errors.BadRequestError:
                    return await self.js.key_value(bucket)  # created concurrently by another replica

        kv = await _retry_js(f"KV bucket {bucket}", _open, deadline)
        self._kv[bucket] = kv
        return kv

    # -- lifecycle ------------------------------------------------------------

    async def close(self) -> None:
        """Drain: finish in-flight handlers and pending publishes, then disconnect.

        Always closes, and never raises for the connection's state: while the
        client is (re)connecting there is nothing to drain (nats-py's ``drain``
        raises ``ConnectionReconnectingError`` then), so it just closes.
        """
        if self.nc.is_closed:
            return
        if self._span_export is not None:
            await self._span_export.drain()  # the last spans go out before the connection does
        if self.nc.is_reconnecting or self.nc.is_connecting:
            await self.nc.close()
            return
        try:
            await self.nc.drain()
        except (nats.errors.ConnectionClosedError, nats.errors.ConnectionDrainingError):
            pass
        except (TimeoutError, nats.errors.Error):
            await self.nc.close()


async def gather(nc: Client, subject: str, payload: bytes = b"", *, wait: float = 0.3) -> list[Msg]:
    """Scatter-gather: publish with a reply inbox, collect answers until ``wait`` passes with none.

    Status-only messages (such as the server's "no responders") are skipped.
    """
    inbox = nc.new_inbox()
    sub = await nc.subscribe(inbox)
    out: list[Msg] = []
    await nc.publish(subject, payload, reply=inbox)
    try:
        while True:
            msg = await sub.next_msg(timeout=wait)
            if msg.data:
                out.append(msg)
    except nats.errors.TimeoutError:
        pass
    finally:
        await sub.unsubscribe()
    return out


async def _retry_js(what: str, attempt: Callable[[], Awaitable[T]], deadline: float) -> T:
    """Run a JetStream management call, retrying transient failures until ``deadline`` seconds."""
    give_up = time.monotonic() + deadline
    delay = 0.2
    while True:
        try:
            return await attempt()
        except (*_JS_TRANSIENT, nats.js.errors.ServerError) as exc:
            if isinstance(exc, nats.js.errors.APIError) and exc.err_code == _JS_NO_STORAGE:
                raise _storage_full(what, exc) from None  # retrying cannot make room
            if time.monotonic() + delay >= give_up:
                raise ServiceUnavailable(
                    f"JetStream could not set up {what} within {deadline:g} s ({type(exc).__name__}): "
                    "is the NATS cluster up, with JetStream enabled?",
                    details={"what": what},
                ) from None
            log.warning("JetStream not ready for %s (%s); retrying", what, type(exc).__name__)
            await asyncio.sleep(delay)
            delay = min(delay * 2, 2.0)


#: JetStream's "insufficient storage resources available": a stream reserves more than the server grants.
_JS_NO_STORAGE = 10047


def _storage_full(what: str, exc: nats.js.errors.APIError) -> JidoError:
    """The ``storage_full`` error of a refused reservation for ``what``: the server's reason and
    what to change (not retryable: only freeing space or a smaller stream helps)."""
    return JidoError(
        f"JetStream has no room for {what}: {exc.description} (nats-server grants streams at most 75 % "
        "of the free space of its store's disk). Free space on that disk, or lower the stream's size: "
        "JIDO_INPUT_MAX_BYTES, JIDO_EVENTS_MAX_BYTES or JIDO_PRD_MAX_BYTES (unset, `jidocode up` "
        "sizes them from the free space)",
        error_type="storage_full",
        details={"what": what, "err_code": _JS_NO_STORAGE},
    )


def subject_of(event: EventModel, project_id: str | None = None, conversation_id: str | None = None) -> str:
    """Where ``event`` is published: ``jido.sig.<type>`` for signals,
    ``jido.evt.<p>.<c>.<type>`` for conversation output. Commands and replies
    are never published on their own (``ValueError``)."""
    if event.channel == "signal":
        return subjects.signal(event.type)
    if event.channel == "conversation":
        if project_id is None or conversation_id is None:
            raise ValueError(f"{event.type} is conversation output: it needs a project and conversation id")
        return subjects.conversation_out(project_id, conversation_id, event.type)
    raise ValueError(f"{event.type} is a {event.channel}: it travels as a request or reply, not on its own")


@functools.cache
def _reply_type(cls: type[EventModel]) -> str:
    """The type a reply model declares (looked up once per model: it is on every call's path)."""
    return str(cls.model_fields["type"].default)


def _typed_reply(subject: str, command: Command[R], payload: bytes) -> R:
    """The reply ``payload`` to ``command`` (sent on ``subject``) as the model the command declares.

    An ``error`` reply is raised as its typed exception; a reply of another type, or data that
    is not the declared model, is an :class:`InvalidEnvelope`. This is where the reply's data
    becomes typed, validated once by the reply model (the trust boundary, docs/decisions/0348).
    """
    reply = decode_reply(payload)
    reply_type = reply["type"]
    data = reply["data"]
    if reply_type == ERROR_TYPE:
        raise from_info(ErrorInfo.model_validate(data if isinstance(data, dict) else {}))
    cls = type(command).reply
    expected = _reply_type(cls)
    if reply_type != expected or type(data) is not dict:
        raise InvalidEnvelope(
            f"{subject} answered {command.type!r} with {reply_type!r}; the contract says {expected!r}",
            details={"subject": subject, "type": reply_type, "expected": expected},
        )
    try:
        if "type" not in data:  # the usual reply: the model's own type is the default
            return cast(R, cls.__pydantic_validator__.validate_python(data))
        return cast(R, cls.model_validate({**data, "type": reply_type}))
    except ValidationError as exc:
        raise InvalidEnvelope(
            f"{subject} answered with an invalid {reply_type!r}: {exc.errors()[0]['msg']}",
            details={"subject": subject, "type": reply_type},
        ) from None


def unknown_endpoint(subject: str) -> str | None:
    """Why nobody answers ``subject`` when it names a verb no endpoint of its service has
    (``unknown endpoint 'verb' (tool_runner serves: run, cancel, …)``); ``None`` otherwise."""
    from jidocode.shared.endpoints import ENDPOINTS  # the catalogue: only on this error's path

    parts = subject.split(".")
    if parts[0] != subjects.PREFIX or len(parts) != (3 if parts[1:2] == ["engine"] else 4):
        return None
    served = [e for e in ENDPOINTS if e.scope == parts[1]]
    if not served or any(e.verb == parts[-1] for e in served):
        return None
    services = "/".join(sorted({e.service for e in served}))
    return f"unknown endpoint {parts[-1]!r} ({services} serves: {', '.join(e.verb for e in served)})"


def error_payload(source: str, error: JidoError, **ext: Any) -> bytes:
    """The encoded error event for ``error`` (the data is its :class:`ErrorInfo`)."""
    return encode(error_envelope(source, error, **ext))[0]
