"""The lease primitive against a real nats-server KV: one winner of a race, renew, lose, stale
takeover (on a fake clock: no waiting for a TTL), server-side expiry with its marker, hand over
and release, and a kept lease renewed until another holder takes it over."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from jidocode.shared.bus import Bus
from jidocode.shared.config import Config
from jidocode.shared.lease import Busy, Held, KeptLease, LeaseBucket, Lost, Seen, Sightings

TTL = 30.0


class _Clock:
    """A clock the test moves: a lease goes stale without anybody waiting for it."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
async def peer(config: Config) -> AsyncIterator[Bus]:
    """A second connection: another replica as far as the bucket can tell."""
    other = await Bus.connect(config.model_copy(update={"instance": "peer"}), "test")
    try:
        yield other
    finally:
        await other.close()


async def _buckets(
    bus: Bus, peer: Bus, name: str, *, clock: _Clock | None = None, **config: float | int
) -> tuple[LeaseBucket, LeaseBucket]:
    mine = await LeaseBucket.open(bus, name, ttl_s=TTL, history=1, **config)
    theirs = await LeaseBucket.open(peer, name, ttl_s=TTL, history=1, **config)
    if clock is not None:
        mine.clock = theirs.clock = clock
    return mine, theirs


def _held(result: Held | Busy | Lost) -> Held:
    assert isinstance(result, Held), result
    return result


async def test_of_two_takers_one_wins_and_renews(bus: Bus, peer: Bus) -> None:
    a, b = await _buckets(bus, peer, "test_lease_race")
    results = await asyncio.gather(*(x.take("p.k", n) for x, n in ((a, "a"), (b, "b")) for _ in range(4)))
    winners = {r.holder for r in results if isinstance(r, Held)}
    assert len(winners) == 1, results  # the winner may take its own key again; the other never
    (winner,) = winners
    assert all(r.holder == winner for r in results if isinstance(r, Busy))
    assert (await a.read("p.k")).holder == winner
    held = _held(await (a if winner == "a" else b).take("p.k", winner))
    renewed = _held(await a.renew(held))
    assert renewed.revision > held.revision
    assert await a.renew(held) == Lost("p.k", held.revision)  # a revision behind: not ours


async def test_a_stale_holder_is_taken_over_and_loses(bus: Bus, peer: Bus) -> None:
    clock = _Clock()
    a, b = await _buckets(bus, peer, "test_lease_stale", clock=clock)
    held = _held(await a.take("p.k", "a"))
    sightings = Sightings(ttl_s=TTL)
    seen = await b.read("p.k")
    sightings.note("p.k", seen.revision, seen.holder, seen.since)
    clock.now = TTL  # unrenewed for exactly the TTL: not yet stale
    assert await b.take("p.k", "b", sightings.seen["p.k"]) == Busy("a", held.revision)
    clock.now = TTL + 1
    assert sightings.stale_keys(clock.now) == ["p.k"]
    taken = _held(await b.take("p.k", "b", sightings.seen["p.k"]))
    assert isinstance(await a.renew(held), Lost)
    assert not await a.release(held)  # a lost lease is left to its new holder
    assert (await a.read("p.k")).holder == "b"
    assert await b.release(taken)


async def test_a_renewal_beats_a_stale_sighting(bus: Bus, peer: Bus) -> None:
    clock = _Clock()
    a, b = await _buckets(bus, peer, "test_lease_renewed", clock=clock)
    held = _held(await a.take("p.k", "a"))
    seen = await b.read("p.k")
    _held(await a.renew(held))  # renewed after b looked: b's sighting is of an old revision
    clock.now = TTL + 1
    assert await b.take("p.k", "b", seen) == Lost("p.k", held.revision)
    assert (await b.read("p.k")).holder == "a"


async def test_hand_over_and_release(bus: Bus, peer: Bus) -> None:
    a, b = await _buckets(bus, peer, "test_lease_hand_over")
    held = _held(await a.take("p.k", "a"))
    assert isinstance(await b.take("p.k", "b"), Busy)
    handed = _held(await a.hand_over(held, "b"))
    assert handed.holder == "b"
    assert isinstance(await a.renew(held), Lost)  # the giver holds nothing any more
    taken = _held(await b.take("p.k", "b"))
    assert isinstance(await a.take("p.k", "a"), Busy)
    assert await b.release(taken)
    assert (await a.read("p.k")).holder is None
    _held(await a.take("p.k", "a"))  # free at once


async def test_the_server_expires_an_unrenewed_lease(bus: Bus, peer: Bus) -> None:
    """Per-message TTLs (NATS 2.11+): the key goes, with a marker a watcher sees, then is free."""
    a = await LeaseBucket.open(
        bus, "test_lease_ttl", ttl_s=2, message_ttl=True, history=1, limit_marker_ttl=60.0
    )
    b = await LeaseBucket.open(
        peer, "test_lease_ttl", ttl_s=2, message_ttl=True, history=1, limit_marker_ttl=60.0
    )
    held = _held(await a.take("p.k", "a"))
    watcher = await b.kv.watch("p.k")
    try:
        async with asyncio.timeout(60):
            async for entry in watcher:
                if entry is not None and entry.revision is not None and entry.revision > held.revision:
                    break  # the expiry marker
    finally:
        await watcher.stop()  # type: ignore[no-untyped-call]
    seen = await b.read("p.k")
    assert seen.holder is None and seen.revision > held.revision
    _held(await b.take("p.k", "b"))
    assert isinstance(await a.renew(held), Lost)


async def test_a_kept_lease_is_renewed_until_lost(bus: Bus, peer: Bus) -> None:
    clock = _Clock()
    a, b = await _buckets(bus, peer, "test_lease_kept", clock=clock)
    lost = asyncio.Event()
    kept = KeptLease(a, _held(await a.take("p.k", "a")), period_s=0.05, on_lost=lambda _: lost.set())
    first = kept.revision
    watcher = await b.kv.watch("p.k")
    try:
        async with asyncio.timeout(60):
            async for entry in watcher:
                if entry is not None and entry.revision is not None and entry.revision > first + 1:
                    break  # renewed twice
        # b takes it as if a had stopped renewing (its sighting dated a TTL back); a renewal may
        # land between b's read and its write: b reads again
        clock.now = TTL + 1
        async with asyncio.timeout(60):
            while True:
                seen = await b.read("p.k")
                assert seen.holder == "a"
                if isinstance(await b.take("p.k", "b", Seen(seen.revision, seen.holder, 0.0)), Held):
                    break
            await lost.wait()
        assert kept.lost is not None
        assert not await kept.release()  # lost: the key stays b's
        assert (await a.read("p.k")).holder == "b"
    finally:
        await watcher.stop()  # type: ignore[no-untyped-call]
        await kept.stop()
