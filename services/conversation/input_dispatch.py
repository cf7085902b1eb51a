"""Input to the conversations loaded here: one consumer per replica, routed to their actors.

A replica reads ``JIDO_CONV_IN`` through ONE ordered push consumer (flow
controlled, :data:`~nats.js.api.DeliverPolicy.NEW`, started with the runtime),
whatever the number of conversations it has loaded: a consumer per loaded
conversation ran into the server's consumer limit (1,000 by default), where the
next conversation hung silently (decision 0326). Each message goes, with its
stream sequence, to the actor registered for its subject; input for a
conversation not loaded here is ignored (the shared wake-up consumer,
``residency.py``, loads a conversation on input).

An actor that loads registers first (live input is then held by it), and then
reads its backlog straight from the stream, one message at a time by subject
(:func:`read_backlog`, no consumer). Live and backlog input overlap; the actor
takes each stream sequence once, in order (``actor.py``). The ordered consumer
resets itself on a gap from the last sequence it delivered, so nothing is lost; when the
connection comes back (a restarted server) it is made again at once from the next sequence.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

import nats.errors
import nats.js.errors
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from nats.js.api import ConsumerConfig, DeliverPolicy

from jidocode.shared import subjects
from jidocode.shared.bus import Bus
from jidocode.shared.envelope import Envelope, decode
from jidocode.shared.errors import JidoError

from .core import Signal, normalize
from .inbox import ValidatedInput, rejection
from .record import ConversationRecord

__all__ = ["ConversationInput", "InputDispatch", "InputMessage", "InputSink", "read_backlog"]

log = logging.getLogger("jidocode.conversation.input")

#: The input consumer's idle heartbeat: a consumer lost without a reconnect (deleted, or a server
#: that lost it) is made again after two missed ones (nats-py's ordered consumer; its default is 5 s).
HEARTBEAT_S = 2.0


@dataclass(frozen=True)
class InputMessage:
    """One message of ``JIDO_CONV_IN``: its stream sequence, payload and headers."""

    seq: int
    data: bytes
    headers: dict[str, str] | None


#: Takes a conversation's input (called in stream order; must not block).
InputSink = Callable[[InputMessage], None]
#: Takes an input as a signal, with its stream sequence and its envelope (``None``: unreadable).
SignalSink = Callable[[Signal, int, Envelope | None], None]


class InputDispatch:
    """The replica's consumer of every conversation's input, and the actors it feeds by subject."""

    def __init__(self, bus: Bus) -> None:
        self.bus = bus
        self._sinks: dict[str, InputSink] = {}
        self._sub: Subscription | None = None
        #: The stream sequence to read from when the consumer is made again.
        self._next = 0
        #: Consumers made again after the connection came back (:meth:`_after_reconnect`).
        self.resets = 0

    def __len__(self) -> int:
        return len(self._sinks)

    @property
    def consumer(self) -> str | None:
        """The name of the consumer on ``JIDO_CONV_IN`` (it changes when the consumer is reset)."""
        name = getattr(self._sub, "_consumer", None)
        return name if isinstance(name, str) and name else None

    async def start(self) -> None:
        """Start reading input stored from now on (before any conversation is loaded here)."""
        info = await self.bus.js.stream_info(subjects.STREAM_CONV_IN)
        self._next = info.state.last_seq + 1
        self._sub = await self._subscribe()
        self.bus.on_reconnect(self._after_reconnect)

    async def _subscribe(self) -> Subscription:
        """An ordered consumer of every conversation's input from :attr:`_next` on."""
        sub: Subscription = await self.bus.js.subscribe(
            subjects.conversation_in_filter(),
            stream=subjects.STREAM_CONV_IN,
            cb=self._on_message,
            ordered_consumer=True,
            idle_heartbeat=HEARTBEAT_S,
            config=ConsumerConfig(deliver_policy=DeliverPolicy.BY_START_SEQUENCE, opt_start_seq=self._next),
        )
        return sub

    async def _after_reconnect(self) -> None:
        """The connection came back (a restarted server may have lost the consumer): read on
        from the next sequence at once, rather than after the ordered consumer misses two
        heartbeats (10-20 s of input left waiting). The actors drop what they had already."""
        delay = 0.2
        for _ in range(30):
            if self._sub is None:
                return  # stopped
            try:
                fresh = await self._subscribe()
            except (nats.errors.Error, nats.js.errors.Error, TimeoutError) as exc:
                log.info("input consumer after a reconnect: %s; trying again", exc)
                await asyncio.sleep(delay)  # JetStream may still be starting
                delay = min(delay * 2, 2.0)
                continue
            old, self._sub = self._sub, fresh
            self.resets += 1
            with contextlib.suppress(Exception):  # gone with the old server, most likely
                await old.unsubscribe()
            return
        log.warning("input consumer: not made again after a reconnect; its heartbeats will reset it")

    async def stop(self) -> None:
        """Stop reading, and delete the consumer (the server would keep it until its inactivity
        threshold)."""
        sub = self._sub
        if sub is None:
            return
        consumer = self.consumer
        self._sub = None
        try:
            await sub.unsubscribe()
            if consumer:
                await self.bus.js.delete_consumer(subjects.STREAM_CONV_IN, consumer)
        except Exception as exc:  # the connection may be closing, the consumer gone already
            log.debug("stopping the input consumer: %s", exc)

    def register(self, subject: str, sink: InputSink) -> None:
        """Send the input on ``subject`` to ``sink`` from now on."""
        self._sinks[subject] = sink

    def unregister(self, subject: str, sink: InputSink) -> None:
        """Stop sending to ``sink`` (a newer actor registered on the same subject keeps its own)."""
        if self._sinks.get(subject) is sink:
            del self._sinks[subject]

    async def _on_message(self, msg: Msg) -> None:
        seq = msg.metadata.sequence.stream
        self._next = max(self._next, seq + 1)
        sink = self._sinks.get(msg.subject)
        if sink is None:
            return  # not loaded here
        try:
            sink(InputMessage(seq, msg.data, msg.headers))
        except Exception:  # one actor's trouble must not stop the input of the others
            log.exception("input on %s", msg.subject)


async def read_backlog(bus: Bus, subject: str, *, after: int = 0) -> AsyncIterator[InputMessage]:
    """The input stored on ``subject`` past sequence ``after``, in order, read by subject from the
    stream (a message get each, no consumer); ends at the last one stored."""
    seq = after + 1
    while True:
        try:
            raw = await bus.js.get_msg(subjects.STREAM_CONV_IN, seq=seq, subject=subject, next=True)
        except nats.js.errors.NotFoundError:
            return
        found = int(raw.seq or 0)
        if found < seq:  # a server that ignored ``next``: never loop
            return
        headers = None
        if raw.headers:
            with contextlib.suppress(AttributeError):
                headers = {str(k): str(v) for k, v in raw.headers.items()}
        yield InputMessage(found, raw.data or b"", headers)
        seq = found + 1


class ConversationInput:
    """One loaded conversation's input, as signals for its actor.

    :meth:`open` registers with the replica's :class:`InputDispatch` (live input
    is held meanwhile), reads the backlog past :attr:`received_seq` from the
    stream, then lets the held input through. Each stream sequence is taken once
    and in order, whichever way it came. Input is validated here, except what
    this replica's ``send_event`` validated and published unchanged
    (:attr:`validated`).
    """

    def __init__(
        self,
        bus: Bus,
        dispatch: InputDispatch,
        conversation: ConversationRecord,
        *,
        max_data_bytes: int,
        take: SignalSink,
    ) -> None:
        self.bus = bus
        self.dispatch = dispatch
        self.project_id = project_id = conversation.project_id
        self.conversation_id = conversation_id = conversation.conversation_id
        self.subject = subjects.conversation_in(project_id, conversation_id)
        self.max_data_bytes = max_data_bytes
        self.take = take
        #: What the runtime's ``send_event`` validated for this conversation and is publishing.
        self.validated = ValidatedInput(project_id, conversation_id)
        #: The stream sequence of the latest input taken.
        self.received_seq = 0
        self._held: list[InputMessage] | None = None

    async def open(self) -> None:
        """Register for live input, then catch up with what the stream holds (see the class docstring)."""
        self._held = []
        self.dispatch.register(self.subject, self._on_live)
        try:
            async for message in read_backlog(self.bus, self.subject, after=self.received_seq):
                self._accept(message)
        finally:
            held, self._held = self._held, None
        for message in held:
            self._accept(message)

    def close(self) -> None:
        self.dispatch.unregister(self.subject, self._on_live)

    def _on_live(self, message: InputMessage) -> None:
        if self._held is not None:
            self._held.append(message)
        else:
            self._accept(message)

    def _accept(self, message: InputMessage) -> None:
        if message.seq <= self.received_seq:
            return  # read from the backlog already
        self.received_seq = message.seq
        signal, env = self.signal_of(message)
        self.take(signal, message.seq, env)

    def signal_of(self, message: InputMessage) -> tuple[Signal, Envelope | None]:
        """The signal ``message`` carries (the validated one, or validated now), or the rejection
        entry naming it."""
        raw: dict[str, Any] = {}
        env: Envelope | None = None
        try:
            # the message: the bus's one payload limit; its data: max_message_bytes (normalize)
            env = decode(message.data, message.headers)
            taken = self.validated.take(env)
            if taken is not None:
                return taken, env
            raw = env.to_dict()
            return normalize(raw, external=True, max_data_bytes=self.max_data_bytes), env
        except JidoError as exc:
            return rejection(exc, message.seq, raw, self.project_id, self.conversation_id), env
