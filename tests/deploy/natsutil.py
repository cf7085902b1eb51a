"""Helpers for the deploy tests: NATS subject matching, connections as a given user, waits that
hold on a loaded machine."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import nats
import nats.errors
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription

from jidocode.shared import nats_permissions as perms


def matches(pattern: str, subject: str) -> bool:
    """NATS wildcard semantics: ``*`` one token, ``>`` one or more trailing tokens."""
    p, s = pattern.split("."), subject.split(".")
    for i, token in enumerate(p):
        if token == ">":
            return len(s) > i
        if i >= len(s) or (token != "*" and token != s[i]):
            return False
    return len(p) == len(s)


def allowed(allow: tuple[str, ...], deny: tuple[str, ...], subject: str) -> bool:
    return any(matches(a, subject) for a in allow) and not any(matches(d, subject) for d in deny)


def may_publish(user: str, subject: str) -> bool:
    p = perms.user_for(user).permissions
    return allowed(p.publish_allow, p.publish_deny, subject)


def may_subscribe(user: str, subject: str) -> bool:
    p = perms.user_for(user).permissions
    return allowed(p.subscribe_allow, p.subscribe_deny, subject)


@dataclass
class Conn:
    """A nats-py client connected as one user, its async errors collected in a queue."""

    nc: Client
    errors: asyncio.Queue[Exception] = field(default_factory=asyncio.Queue)

    async def next_error(self, timeout: float = 5.0) -> str:
        """The next error the server reported to this client (lowercased by nats-py)."""
        return str(await asyncio.wait_for(self.errors.get(), timeout))

    async def assert_no_errors(self) -> None:
        """A flush is a round trip: any violation of what we sent before has arrived by now."""
        await self.nc.flush(timeout=5)
        assert self.errors.empty(), f"unexpected errors: {list(self.errors._queue)}"  # type: ignore[attr-defined]


async def first_request(nc: Client, subject: str, data: bytes, timeout: float = 10.0) -> Msg:
    """A request to an endpoint that was just registered.

    Right after a nats.micro endpoint subscribes (and flushes), the first request very rarely
    gets a no-responders status although the subscription is in place; it happens with and
    without authorization, so it is not a permission effect. Ask again until it answers.
    """

    async def attempt() -> Msg:
        while True:
            try:
                return await nc.request(subject, data, timeout=timeout)
            except nats.errors.NoRespondersError:
                await asyncio.sleep(0.05)  # bounded by wait_for

    return await asyncio.wait_for(attempt(), timeout)


async def until_live(pub: Client, sub: Subscription, subject: str, timeout: float = 15.0) -> None:
    """Return once ``sub`` (another connection's) receives what ``pub`` publishes on ``subject``.

    A subscription flushed on one connection is very rarely not yet matched by a publish from
    another one (the same effect as :func:`first_request`'s no-responders; a signal published
    once was lost that way on a loaded CI machine). Probes go out until one arrives; a probe
    published earlier by ``pub`` either arrived before it or was lost, so none is left in
    flight for the caller's next message. Bounded by ``timeout``.
    """

    async def attempt() -> None:
        while True:
            await pub.publish(subject, b"probe")
            await pub.flush()
            try:
                msg = await sub.next_msg(timeout=0.5)
            except nats.errors.TimeoutError:
                continue
            if msg.data == b"probe":
                return

    await asyncio.wait_for(attempt(), timeout)


@asynccontextmanager
async def connect_as(url: str, user: str, passwords: Mapping[str, str]) -> AsyncIterator[Conn]:
    errors: asyncio.Queue[Exception] = asyncio.Queue()

    async def _error_cb(exc: Exception) -> None:
        await errors.put(exc)

    nc = await nats.connect(
        url,
        user=user,
        password=passwords[user],
        inbox_prefix=perms.inbox_prefix(user),
        error_cb=_error_cb,
        allow_reconnect=False,
        connect_timeout=5,
    )
    try:
        yield Conn(nc, errors)
    finally:
        await nc.close()
