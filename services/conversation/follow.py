"""Reading a conversation's stored output from outside, from an event id on.

The ``replay`` endpoint answers a :class:`ReplayInfo`; :func:`replay_events`
reads what ``STREAM_EVENTS`` stores from its start sequence now (an ordered
consumer, ended once nothing is pending). Live output is followed on the
subject the answer names (``docs/conversation.md``, "Subscribers").
"""

from __future__ import annotations

import asyncio
import contextlib

from nats.aio.msg import Msg
from nats.js.api import ConsumerConfig, DeliverPolicy

from jidocode.shared.bus import Bus
from jidocode.shared.envelope import Envelope, decode
from jidocode.shared.errors import JidoError
from jidocode.shared.events.conversation import ReplayInfo

__all__ = ["replay_events"]


def _config(info: ReplayInfo) -> ConsumerConfig:
    start = info.start_sequence
    if start <= 1:
        return ConsumerConfig(deliver_policy=DeliverPolicy.ALL)
    return ConsumerConfig(deliver_policy=DeliverPolicy.BY_START_SEQUENCE, opt_start_seq=start)


async def replay_events(bus: Bus, info: ReplayInfo, timeout: float = 10.0) -> list[Envelope]:
    """The events stored now from ``info.start_sequence`` on (no live ones)."""
    out: list[Envelope] = []
    done = asyncio.Event()

    async def _cb(msg: Msg) -> None:
        with contextlib.suppress(JidoError):
            out.append(decode(msg.data, msg.headers))
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
