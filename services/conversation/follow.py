"""Following a conversation from outside: live output plus replay from an event id.

The ``replay`` endpoint answers a :class:`ReplayInfo`;
:func:`follow` turns it into an ordered JetStream consumer on
``STREAM_EVENTS`` that delivers every stored event after ``after_id`` and then
the live ones, in order. :func:`replay_events` reads what is stored now.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from nats.aio.msg import Msg
from nats.js.api import ConsumerConfig, DeliverPolicy
from nats.js.client import JetStreamContext

from jidocode.shared.bus import Bus
from jidocode.shared.envelope import Envelope, decode
from jidocode.shared.errors import JidoError
from jidocode.shared.events.conversation import ReplayInfo

__all__ = ["follow", "replay_events"]


def _config(info: ReplayInfo) -> ConsumerConfig:
    start = info.start_sequence
    if start <= 1:
        return ConsumerConfig(deliver_policy=DeliverPolicy.ALL)
    return ConsumerConfig(deliver_policy=DeliverPolicy.BY_START_SEQUENCE, opt_start_seq=start)


async def follow(
    bus: Bus, info: ReplayInfo, handler: Callable[[Envelope], Awaitable[None]]
) -> JetStreamContext.PushSubscription:
    """Deliver the conversation's stored events from ``info.start_sequence``, then live ones."""

    async def _cb(msg: Msg) -> None:
        try:
            env = decode(msg.data, msg.headers)
        except JidoError:
            return
        await handler(env)

    sub: JetStreamContext.PushSubscription = await bus.js.subscribe(
        info.subject, stream=info.stream, cb=_cb, ordered_consumer=True, config=_config(info)
    )
    return sub


async def replay_events(bus: Bus, info: ReplayInfo, timeout: float = 10.0) -> list[Envelope]:
    """The events stored now from ``info.start_sequence`` on (no live ones)."""
    out: list[Envelope] = []
    done = asyncio.Event()

    async def _cb(msg: Msg) -> None:
        try:
            out.append(decode(msg.data, msg.headers))
        except JidoError:
            pass
        if msg.metadata.num_pending == 0:
            done.set()

    sub = await bus.js.subscribe(
        info.subject, stream=info.stream, cb=_cb, ordered_consumer=True, config=_config(info)
    )
    try:
        consumer = await sub.consumer_info()
        if consumer.num_pending or (consumer.delivered and consumer.delivered.stream_seq):
            await asyncio.wait_for(done.wait(), timeout)
    finally:
        await sub.unsubscribe()
    return out
