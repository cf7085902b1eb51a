"""A nats.micro service whose endpoints speak CloudEvents.

:class:`ServiceHost` registers a ``nats.micro`` service (name, version,
endpoints: found by ``$SRV.PING``/``INFO``/``STATS`` and the stock ``nats``
tool) and wraps every handler in the same middleware: decode the request
envelope, validate its data as the endpoint's command, call the handler with
both, send the reply model it returns (the one the command declares) as the
reply event, and turn any :class:`JidoError` into an ``error`` event reply. A
handler never sees a malformed message and never builds a reply by hand.
Each endpoint's ``$SRV.INFO`` metadata names its request and reply types.
Endpoints use queue groups, so replicas share the load.

Requests are handled concurrently: nats-py runs one subscription's callbacks
one after another, so a slow request would otherwise block every other
request of the replica (and a handler that calls back into its own service
would deadlock). Each request runs as a task of its own, at most ``max_concurrent``
at once per host; past that the subscription waits, which is NATS's own
backpressure. A request starts eagerly (``shared/eager.py``): it runs at once, up
to its first wait, so one answered without waiting on I/O is answered in the same
turn of the event loop, and costs no new task.
``stop()`` stops taking requests, then lets the ones in flight finish for up to
``drain_timeout`` seconds before cancelling them.

A handler that waits for something slow and outside the service (a human's
approval) gives its slot back for the wait: ``async with host.released(): …``
(the slot is taken again, waiting like a new request, when the block ends).
The waits are then bounded by the handler's own limit, not by the slots, so
they cannot starve the other requests of the replica.

A per-project endpoint is served with :meth:`ServiceHost.serve_project`: its
handler is handed the project id of the subject the request arrived on
(checked against the ``projectid`` extension, see :func:`scoped_project_id`)
before the command, so no handler reads it from the envelope by hand.

Every service's ``serve(config, stop)`` runs one :class:`ServiceLifecycle`:
connect, build (endpoints, subscriptions, what to close), start the host, wait
for ``stop``, drain the host, close in the reverse order, the bus last.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import operator
import os
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from types import TracebackType
from typing import TYPE_CHECKING, Any, Protocol, Self, TypeVar, cast

import nats.errors
from nats.micro import add_service
from nats.micro.request import Request
from nats.micro.service import EndpointConfig, Service, ServiceConfig
from pydantic import ValidationError

from jidocode.shared.bus import Bus
from jidocode.shared.eager import EagerStarter
from jidocode.shared.endpoints import ENDPOINTS, Endpoint
from jidocode.shared.envelope import (
    MAX_PAYLOAD_BYTES,
    Envelope,
    decode,
    encode,
    encode_event,
    error_envelope,
)
from jidocode.shared.errors import InvalidInput, JidoError, PayloadTooLarge
from jidocode.shared.events import Command, EventModel, event_class
from jidocode.shared.jsonable import to_jsonable
from jidocode.shared.subjects import SERVICE_NAMES, project_id_of
from jidocode.shared.telemetry import ATTR_CONVERSATION, ATTR_PROJECT, metrics, set_log_scope

if TYPE_CHECKING:
    from opentelemetry.trace import Tracer

    from jidocode.shared.config import Config

__all__ = [
    "Handler",
    "ProjectHandler",
    "ServiceHost",
    "ServiceLifecycle",
    "expect",
    "scoped_project_id",
    "to_jsonable",
]

log = logging.getLogger("jidocode.service")

C = TypeVar("C", bound=Command[Any])
E = TypeVar("E", bound=EventModel)

#: A typed endpoint handler: the validated command and its envelope in, the reply model out.
Handler = Callable[[C, Envelope], Awaitable[EventModel]]
#: A per-project endpoint handler: the subject's project id, the command and its envelope in.
ProjectHandler = Callable[[str, C, Envelope], Awaitable[EventModel]]

VERSION = "0.1.0"


def expect(env: Envelope, cls: type[E], *, endpoint: str | None = None) -> E:
    """The request's catalogue event, which must be a ``cls``.

    The type is compared before the data is read, so a request of another type is an
    ``InvalidInput`` naming the type received, the type expected and ``endpoint`` (with the
    subjects that do take that type), never a schema error of the expected type's fields.
    """
    expected = cls.model_fields["type"].default
    if env.type != expected:
        raise _wrong_type(env, expected, endpoint)
    event = env.event()
    if not isinstance(event, cls):  # a command served on another's endpoint: same type, other class
        raise InvalidInput(f"expected a {cls.__name__}, got {type(event).__name__}")
    return event


def _wrong_type(env: Envelope, expected: str, endpoint: str | None) -> InvalidInput:
    details: dict[str, Any] = {"expected": expected, "type": env.type}
    message = f"expected a {expected!r} request, got {env.type!r}"
    if endpoint is not None:
        details["endpoint"] = endpoint
        message = f"{endpoint} (on {env.nats_subject}) {message}"
    served = [e.pattern() for e in ENDPOINTS if e.request_type == env.type]
    if served:
        details["served_on"] = served
        message += f"; {env.type!r} is served on {', '.join(served)}"
    elif event_class(env.type) is None:
        message += f"; {env.type!r} is no type of the catalogue"
    return InvalidInput(message, details=details)


def scoped_project_id(env: Envelope) -> str:
    """The project id of the subject a request arrived on (``jido.<kind>.<p>.<verb>``).

    The subject is authoritative: a ``projectid`` extension naming another
    project is refused, so a request cannot act on one project through another's subject.
    """
    try:
        project_id = project_id_of(env.nats_subject or "")
    except ValueError as exc:
        raise InvalidInput(str(exc), details={"subject": env.nats_subject}) from None
    if env.project_id is not None and env.project_id != project_id:
        raise InvalidInput(
            f"projectid {env.project_id!r} does not match the subject's project {project_id!r}",
            details={"projectid": env.project_id, "subject": env.nats_subject},
        )
    return project_id


class ServiceHost:
    """One micro service of JidoCode (``name`` is a key of ``SERVICE_NAMES``)."""

    def __init__(
        self,
        bus: Bus,
        *,
        name: str,
        version: str = VERSION,
        description: str = "",
        max_request_bytes: int = MAX_PAYLOAD_BYTES,
        metadata: dict[str, str] | None = None,
        max_concurrent: int = 256,
        drain_timeout: float = 10.0,
    ) -> None:
        if name not in SERVICE_NAMES:
            raise ValueError(f"unknown service {name!r}: expected one of {sorted(SERVICE_NAMES)}")
        if max_concurrent < 1:
            raise ValueError(f"max_concurrent must be at least 1, got {max_concurrent}")
        if drain_timeout < 0:
            raise ValueError(f"drain_timeout must not be negative, got {drain_timeout}")
        if not 1 <= max_request_bytes <= MAX_PAYLOAD_BYTES:
            raise ValueError(
                f"max_request_bytes must be 1 to {MAX_PAYLOAD_BYTES} (the bus payload limit), "
                f"got {max_request_bytes}"
            )
        self.bus = bus
        self.name = name
        self.micro_name = SERVICE_NAMES[name]
        self.version = version
        self.description = description
        self.max_request_bytes = max_request_bytes
        self.metadata = {"instance": bus.source, "pid": str(os.getpid()), **(metadata or {})}
        self._endpoints: list[EndpointConfig] = []
        self._service: Service | None = None
        self._slots = asyncio.Semaphore(max_concurrent)
        self._inflight: set[asyncio.Task[Any]] = set()
        #: The request tasks holding a slot now (a task in :meth:`released` does not).
        self._holding: set[asyncio.Task[Any]] = set()
        self._starter = EagerStarter(name)
        self.drain_timeout = drain_timeout

    def serve(self, endpoint: Endpoint, handler: Handler[C]) -> None:
        """Serve ``endpoint`` of the catalogue (``shared.endpoints``) with ``handler``."""
        if endpoint.service != self.name:
            raise ValueError(f"endpoint {endpoint.service}.{endpoint.verb} belongs to another service")
        self.endpoint(cast(type[C], endpoint.command), endpoint.pattern(), handler, name=endpoint.verb)

    def serve_project(self, endpoint: Endpoint, handler: ProjectHandler[C]) -> None:
        """Serve the per-project ``endpoint`` with ``handler``, handed the request's project id.

        The id is the subject's (:func:`scoped_project_id`): a ``projectid`` extension naming
        another project is an ``invalid_input`` reply, and the handler is not called.
        """
        if not endpoint.scoped:
            raise ValueError(f"endpoint {endpoint.service}.{endpoint.verb} is not per project: use serve()")

        async def scoped(cmd: C, env: Envelope) -> EventModel:
            return await handler(scoped_project_id(env), cmd, env)

        self.serve(endpoint, scoped)

    def endpoint(
        self,
        command: type[C],
        subject: str,
        handler: Handler[C],
        *,
        name: str | None = None,
        queue_group: str | None = None,
    ) -> None:
        """Answer ``command`` requests on ``subject`` with ``handler`` (before :meth:`start`).

        The middleware validates the request as ``command`` (another type is an
        ``invalid_input`` error naming both and the endpoint), calls ``handler(command, envelope)``
        and replies with what it returns, which must be a ``command.reply``. The
        endpoint's ``$SRV.INFO`` metadata names the request and reply types.
        """
        if self._service is not None:
            raise RuntimeError("add endpoints before start()")
        name = name or subject.rsplit(".", 1)[-1]
        request_type = str(command.model_fields["type"].default)
        reply_type = str(command.reply.model_fields["type"].default)
        config = EndpointConfig(
            name=name,
            subject=subject,
            handler=self._wrap(name, subject, command, handler),
            queue_group=queue_group or self.micro_name,
            metadata={"request_type": request_type, "reply_type": reply_type},
        )
        self._endpoints.append(config)

    def _wrap(
        self, endpoint: str, subject: str, command: type[C], handler: Handler[C]
    ) -> Callable[[Request], Awaitable[None]]:
        source = self.bus.source
        max_bytes = self.max_request_bytes
        reply_cls = command.reply
        label = f"{self.name}.{endpoint}"
        validate = _request_validator(command, label)
        # ``jido.<kind>.<p>.<verb>``: only a subject of 4 tokens or more can name a project
        named = subject.count(".") >= 3 or subject.endswith(">")
        subject_project = _subject_project if named else _nothing
        # read only where the command has it (a missing attribute costs a pydantic model dearly)
        names_conversation = "conversation_id" in command.model_fields or hasattr(command, "conversation_id")
        conversation_of = operator.attrgetter("conversation_id") if names_conversation else _nothing
        requests = metrics.REQUESTS.labels(self.name, endpoint)
        duration = metrics.REQUEST_DURATION.labels(self.name, endpoint)

        async def _handle(request: Request) -> None:
            env: Envelope | None = None
            started = time.perf_counter()
            requests.inc()
            try:
                env = decode(request.data, request.headers, max_bytes=max_bytes, nats_subject=request.subject)
                cmd = validate(env)
                conversation_id = env.conversation_id or conversation_of(cmd)
                set_log_scope(env.project_id or subject_project(env.nats_subject), conversation_id)
                tracer = self.bus.tracer
                if tracer is None:
                    result = await handler(cmd, env)
                else:
                    result = await _traced(tracer, label, env, cmd, conversation_id, handler)
                if not isinstance(result, reply_cls):
                    raise TypeError(
                        f"handler answered {type(result).__name__}, the contract says {reply_cls.__name__}"
                    )
                reply = _reply(source, env, result)  # a reply over the bus limit is an error reply
            except Exception as exc:
                error = exc if isinstance(exc, JidoError) else _internal(endpoint, exc)
                metrics.REQUEST_ERRORS.labels(self.name, endpoint, error.type).inc()
                duration.observe(time.perf_counter() - started)
                await _reply_error(request, source, error, env)
                return
            duration.observe(time.perf_counter() - started)
            await request.respond(reply)

        task_name = f"{self.name}-{endpoint}"

        async def _spawn(request: Request) -> None:
            await self._slots.acquire()
            # Eagerly: a request answered without waiting on I/O is answered now, with no task
            # made for it; one that waits carries on in a task (shared/eager.py).
            self._starter.start(_handle(request), name=task_name, on_start=self._track, on_end=self._done)

        return _spawn

    def _track(self, task: asyncio.Task[Any]) -> None:
        """Count ``task`` as a request in flight holding a slot (before it starts)."""
        self._inflight.add(task)
        self._holding.add(task)

    def _done(self, task: asyncio.Task[Any]) -> None:
        self._inflight.discard(task)
        if task in self._holding:
            self._holding.discard(task)
            self._slots.release()

    @contextlib.asynccontextmanager
    async def released(self) -> AsyncIterator[None]:
        """Give the current request's slot back for the block; take one again when it ends.

        For waits on something outside the service (an approval), which would
        otherwise hold a slot the whole time. Outside a request of this host
        (another task, a nested use) it does nothing. If the task is cancelled
        while it waits to get a slot back, it ends holding none.
        """
        task = asyncio.current_task()
        if task is None or task not in self._holding:
            yield
            return
        self._holding.discard(task)
        self._slots.release()
        try:
            yield
        finally:
            await self._slots.acquire()
            self._holding.add(task)

    @property
    def waiting_released(self) -> int:
        """Requests in flight that hold no slot now (inside :meth:`released`)."""
        return len(self._inflight) - len(self._holding)

    @property
    def inflight(self) -> int:
        """Requests being handled right now."""
        return len(self._inflight)

    async def start(self) -> None:
        self._service = await add_service(
            self.bus.nc,
            ServiceConfig(
                name=self.micro_name,
                version=self.version,
                description=self.description or f"JidoCode {self.name} service",
                metadata=self.metadata,
            ),
        )
        for config in self._endpoints:
            await self._service.add_endpoint(config)
        # Once flushed, the server has every subscription: "ready" means requests are answered.
        await self.bus.nc.flush()

    async def stop(self) -> None:
        """Stop taking requests; let those in flight finish (``drain_timeout``), cancel the rest."""
        if self._service is not None:
            await self._service.stop()
            self._service = None
        self._starter.close()
        if self._inflight:
            _, pending = await asyncio.wait(set(self._inflight), timeout=self.drain_timeout)
            for task in pending:
                task.cancel()
            if pending:
                log.warning(
                    "%s: cancelled %d request(s) still running after %.1f s",
                    self.name,
                    len(pending),
                    self.drain_timeout,
                )
                await asyncio.gather(*pending, return_exceptions=True)

    @property
    def service(self) -> Service | None:
        return self._service


class Startable(Protocol):
    """A part of a service with its own start and stop (the tool runner, the gateway's server)."""

    async def start(self) -> None: ...

    async def stop(self) -> None: ...


class ServiceLifecycle:
    """Connect, serve, wait for stop, drain, close: the run of every service's ``serve()``.

    ::

        async with ServiceLifecycle(config, "engine") as life:
            host = life.host(description="…")  # started by run(), drained first on exit
            host.serve(…)
            life.on_close(thing.close)          # closed on exit, in the reverse order
            await life.run(stop, ready="engine ready")

    On leaving the block, whether ``stop`` was set, the build failed or the task was
    cancelled: the host stops taking requests and drains, what was registered closes (last
    registered first), and the bus closes last.
    """

    def __init__(self, config: Config, name: str) -> None:
        self.config = config
        self.name = name
        self._stack = contextlib.AsyncExitStack()
        self._bus: Bus | None = None
        self._host: ServiceHost | None = None

    async def __aenter__(self) -> Self:
        self._bus = await Bus.connect(self.config, self.name)
        self._stack.push_async_callback(self._close_bus, self._bus)
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> bool | None:
        return await self._stack.__aexit__(kind, exc, tb)

    @property
    def bus(self) -> Bus:
        """The service's bus connection (open inside the ``async with`` block)."""
        if self._bus is None:
            raise RuntimeError(f"{self.name}: the bus is connected on entering the lifecycle")
        return self._bus

    def host(self, **options: Any) -> ServiceHost:
        """The service's :class:`ServiceHost` (``options`` as its constructor takes them)."""
        if self._host is not None:
            raise RuntimeError(f"{self.name} already has a service host")
        self._host = ServiceHost(self.bus, name=self.name, **options)
        return self._host

    def on_close(self, close: Callable[[], Awaitable[object]]) -> None:
        """Call ``close`` on leaving the block (before what was registered earlier, and the bus)."""
        self._stack.push_async_callback(close)

    async def start(self, part: Startable) -> None:
        """Start ``part`` now and stop it on leaving the block."""
        await part.start()
        self.on_close(part.stop)

    async def run(
        self, stop: asyncio.Event, *, ready: str | None = None, on_ready: Callable[[], object] | None = None
    ) -> None:
        """Start the host, log ``ready`` (``"<name> ready"`` by default) on the service's logger
        (``jidocode.<name>``), call ``on_ready``, and wait until ``stop`` is set."""
        if self._host is not None:
            await self.start(self._host)
        logging.getLogger(f"jidocode.{self.name}").info("%s", ready or f"{self.name} ready")
        if on_ready is not None:
            on_ready()
        await stop.wait()

    @staticmethod
    async def _close_bus(bus: Bus) -> None:
        with contextlib.suppress(nats.errors.Error):
            await bus.close()


def _internal(endpoint: str, exc: Exception) -> JidoError:
    """The ``internal`` error answering a request whose handler raised ``exc`` (logged here)."""
    log.error("endpoint %s failed", endpoint, exc_info=exc)
    return JidoError(f"internal error in {endpoint}: {type(exc).__name__}: {exc}", error_type="internal")


def _request_validator(command: type[C], label: str) -> Callable[[Envelope], C]:
    """The request's command, as :func:`expect` gives it, for endpoint ``label`` of ``command``.

    The usual request (the endpoint's type, its data an object without a ``type`` key) goes
    straight to the model's validator: the same model ``expect`` would build, without copying
    the data or looking the type up in the catalogue. Anything else, and any data that does not
    validate, goes through ``expect``, whose errors name what is wrong.
    """
    expected = command.model_fields["type"].default
    direct = event_class(expected) is command  # else expect() refuses it: another class of the type

    def validate(env: Envelope) -> C:
        data = env.data
        if direct and env.type == expected and type(data) is dict and "type" not in data:
            try:  # (the validator looked up now: a model built lazily has a stand-in until then)
                return cast(C, command.__pydantic_validator__.validate_python(data))
            except ValidationError:
                pass  # expect() turns it into an invalid_input naming the fields
        return expect(env, command, endpoint=label)

    return validate


def _nothing(_: object) -> None:
    """``None``: the project of a request subject too short to name one (``jido.engine.<verb>``),
    the conversation of a command without one."""
    return None


def _subject_project(subject: str | None) -> str | None:
    """The project id of a per-project request subject; ``None`` for the engine's."""
    try:
        return project_id_of(subject or "")
    except ValueError:
        return None


async def _traced(
    tracer: Tracer,
    label: str,
    env: Envelope,
    cmd: C,
    conversation_id: str | None,
    handler: Handler[C],
) -> EventModel:
    """The handler inside a server span, child of the span the request carries (if any)."""
    from jidocode.shared.telemetry.spans import SpanKind, extract, span

    attrs = {
        "rpc.system": "nats",
        "rpc.method": label,
        "messaging.destination.name": env.nats_subject,
        ATTR_PROJECT: env.project_id or _subject_project(env.nats_subject),
        ATTR_CONVERSATION: conversation_id,
    }
    with span(tracer, label, context=extract(env.extensions), kind=SpanKind.SERVER, attributes=attrs):
        return await handler(cmd, env)


_ECHOED = ("correlationid", "projectid", "conversationid")


def _reply(source: str, request: Envelope, result: EventModel) -> bytes:
    """The encoded reply event answering ``request``: its ``causationid`` is the
    request's id, and it echoes the request's correlation, project and conversation."""
    ext = {"causationid": request.id}
    for key in _ECHOED:
        value = request.extensions.get(key)
        if value is not None:
            ext[key] = value
    return encode_event(result, source=source, extensions=ext)[1]


async def _reply_error(request: Request, source: str, error: JidoError, env: Envelope | None) -> None:
    ext: dict[str, str | None] = {}
    if env is not None:
        ext = {"causation_id": env.id, "correlation_id": env.correlation_id, "project_id": env.project_id}
    try:
        payload = encode(error_envelope(source, error, **ext))[0]
    except PayloadTooLarge as too_large:  # details too large to send: the error without them
        shrunk = JidoError(
            error.message[:4000],
            error_type=error.type,
            retryable=error.retryable,
            details={"details_dropped": too_large.details},
        )
        payload = encode(error_envelope(source, shrunk, **ext))[0]
    # The micro error headers let stock tooling see the failure; the body is our error event.
    code = "500" if error.type == "internal" else "400"
    await request.respond(
        payload, headers={"Nats-Service-Error": error.message[:200], "Nats-Service-Error-Code": code}
    )
