"""The lease primitive's pure core (shared/lease.py) without a bus: holder values, the take
decision, what a write's answer means, sightings, and a state machine of holders taking, renewing,
releasing, handing over and expiring one key of a compare-and-set store on a fake clock (the KV
adapter runs against a real nats-server in tests/integration/shared/test_lease_kv.py)."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule
from nats.js.kv import KeyValue

from jidocode.shared.lease import (
    Busy,
    Held,
    Lost,
    Seen,
    Sightings,
    Take,
    after_write,
    decide_take,
    encode_holder,
    holder_of,
    is_stale,
)

names = st.text(min_size=1, max_size=40)


@given(holder=names)
def test_a_holder_reads_back_as_written(holder: str) -> None:
    assert holder_of(encode_holder(holder)) == holder


@pytest.mark.parametrize(
    ("value", "holder"),
    [
        (b"", None),  # a delete, or the server's marker of an expired key
        (None, None),
        (b"child-1", "child-1"),  # a sub-agent slot as written before the primitive
        (b'{"owner": "conv-a", "at": "2026-01-01T00:00:00Z"}', "conv-a"),  # a conversation lease
        (b'{"instance": "tool_runner-q1"}', "tool_runner-q1"),  # a quota lease
        (b'{"holder": "h", "owner": "o"}', "h"),
        (b"[1, 2]", "[1, 2]"),
    ],
)
def test_holders_of_every_value_the_buckets_hold(value: bytes | None, holder: str | None) -> None:
    assert holder_of(value) == holder


def test_a_nameless_holder_is_refused() -> None:
    with pytest.raises(ValueError, match="non-empty name"):
        encode_holder("")


@pytest.mark.parametrize(
    ("seen", "now", "decision"),
    [
        (Seen(), 0.0, Take(0)),  # never written
        (Seen(7, None, 0.0), 1.0, Take(7)),  # deleted or expired: written over its marker
        (Seen(7, "me", 0.0), 1.0, Take(7)),  # handed over to me, or mine already
        (Seen(7, "other", 0.0), 10.0, Busy("other", 7)),  # renewed just within the TTL
        (Seen(7, "other", 0.0), 10.5, Take(7)),  # went unrenewed for over the TTL: stale
    ],
)
def test_the_take_decision(seen: Seen, now: float, decision: Take | Busy) -> None:
    assert decide_take(seen, "me", now, 10.0) == decision


def test_a_write_answer_holds_or_loses() -> None:
    assert after_write("k", "me", 3, 4, 1.5) == Held("k", "me", 4, 1.5)
    assert after_write("k", "me", 3, None, 1.5) == Lost("k", 3)
    held = Held("k", "me", 4, 1.5)
    assert held.valid(11.4, 10.0) and not held.valid(11.5, 10.0)


def test_sightings_keep_the_first_sight_of_a_revision() -> None:
    sightings = Sightings(ttl_s=5.0)
    sightings.note("a", 1, "x", 0.0)
    sightings.note("a", 1, "x", 4.0)  # the same revision seen again: no renewal
    sightings.note("a", 0, None, 4.0)  # an older one, late: ignored
    sightings.note("b", 2, "y", 0.0)
    sightings.note("b", 3, "y", 3.0)  # renewed
    sightings.note("c", 4, None, 0.0)  # free: never stale
    assert sightings.stale_keys(5.5) == ["a"]
    assert [s.revision for s in sightings.stale(8.5)] == [1, 3]
    assert not is_stale(Seen(1, "x", 0.0), 5.0, 5.0)


def test_sightings_of_watched_entries() -> None:
    sightings = Sightings(ttl_s=5.0)
    put = KeyValue.Entry("b", "a", encode_holder("x"), 1, None, None, None)
    assert sightings.note_entry(put, 0.0) == Seen(1, "x", 0.0)
    deleted = KeyValue.Entry("b", "a", b"", 2, None, None, "DEL")
    assert sightings.note_entry(deleted, 1.0) == Seen(2, None, 1.0)
    assert sightings.note_entry(KeyValue.Entry("b", "a", None, None, None, None, None), 2.0) is None
    assert sightings.stale_keys(10.0) == []


# -- the state machine ------------------------------------------------------------------------------

TTL = 10.0
HOLDERS = ("a", "b", "c")
KEY = "k"


@dataclass
class _Store:
    """A compare-and-set KV of one key, as JetStream keeps it: each write a new revision, a
    write on another revision refused, and (like a per-message TTL) expiry past ``ttl`` since the
    last write leaving a marker."""

    revision: int = 0
    holder: str | None = None
    written_at: float = 0.0
    writes: list[tuple[float, str | None]] = field(default_factory=list)

    def write(self, expected: int, holder: str | None, now: float) -> int | None:
        if expected != self.revision:
            return None
        self.revision += 1
        self.holder, self.written_at = holder, now
        self.writes.append((now, holder))
        return self.revision

    def expire(self, now: float) -> None:
        if self.holder is not None and now - self.written_at >= TTL:
            self.write(self.revision, None, now)


class LeaseMachine(RuleBasedStateMachine):
    """Holders drive the pure core against :class:`_Store` on one fake clock; at most one of them
    ever holds a lease still valid, and a holder's revision in the store names that holder."""

    def __init__(self) -> None:
        super().__init__()
        self.now = 0.0
        self.store = _Store()
        self.held: dict[str, Held] = {}
        self.sightings = {h: Sightings(ttl_s=TTL) for h in HOLDERS}

    def _look(self, who: str) -> Seen:
        return self.sightings[who].note(KEY, self.store.revision, self.store.holder, self.now)

    def _write(self, who: str, as_holder: str, expected: int) -> Held | Lost:
        sent_at = self.now
        return after_write(KEY, as_holder, expected, self.store.write(expected, as_holder, self.now), sent_at)

    @rule(dt=st.sampled_from([0.0, 0.5, TTL / 3, 0.6 * TTL, TTL - 0.5, TTL, TTL + 0.5, 2 * TTL]))
    def advance(self, dt: float) -> None:
        self.now += dt

    @rule()
    def server_expires(self) -> None:
        self.store.expire(self.now)

    @rule(who=st.sampled_from(HOLDERS))
    def look(self, who: str) -> None:
        self._look(who)

    @rule(who=st.sampled_from(HOLDERS), fresh=st.booleans())
    def take(self, who: str, fresh: bool) -> None:
        """From a read now (``fresh``) or from what ``who`` last saw (a watcher's sighting)."""
        seen = self._look(who) if fresh else self.sightings[who].seen.get(KEY, Seen(since=self.now))
        decision = decide_take(seen, who, self.now, TTL)
        if isinstance(decision, Busy):
            assert decision.holder != who
            return
        result = self._write(who, who, decision.expected)
        if isinstance(result, Held):
            self.held[who] = result
        else:
            assert self.store.revision != decision.expected

    @precondition(lambda self: self.held)
    @rule(data=st.data())
    def renew(self, data: st.DataObject) -> None:
        who = data.draw(st.sampled_from(sorted(self.held)))
        held = self.held[who]
        result = self._write(who, who, held.revision)
        if isinstance(result, Lost):
            del self.held[who]
            assert self.store.holder != who or self.store.revision != held.revision
        else:
            self.held[who] = result

    @precondition(lambda self: self.held)
    @rule(data=st.data())
    def release(self, data: st.DataObject) -> None:
        who = data.draw(st.sampled_from(sorted(self.held)))
        self.store.write(self.held.pop(who).revision, None, self.now)

    @precondition(lambda self: self.held)
    @rule(data=st.data(), to=st.sampled_from(HOLDERS))
    def hand_over(self, data: st.DataObject, to: str) -> None:
        who = data.draw(st.sampled_from(sorted(self.held)))
        held = self.held.pop(who)
        result = self._write(who, to, held.revision)
        if isinstance(result, Held):
            # the receiver takes it at once: the key names it, whoever else looks
            seen = self._look(to)
            assert seen.holder == to and decide_take(seen, to, self.now, TTL) == Take(result.revision)
            for other in HOLDERS:
                if other != to:
                    assert isinstance(decide_take(self._look(other), other, self.now, TTL), Busy)

    @invariant()
    def at_most_one_valid_holder(self) -> None:
        valid = [who for who, held in self.held.items() if held.valid(self.now, TTL)]
        assert len(valid) <= 1, f"{valid} all hold the lease at {self.now}"

    @invariant()
    def the_store_names_the_holder_of_its_revision(self) -> None:
        for who, held in self.held.items():
            if held.revision == self.store.revision:
                assert self.store.holder == who


TestLeaseMachine = LeaseMachine.TestCase
TestLeaseMachine.settings = settings(max_examples=400, stateful_step_count=25, deadline=None)
