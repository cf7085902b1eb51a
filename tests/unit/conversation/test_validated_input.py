"""Input validated by ``send_event`` is not validated again by the actor, and nothing else skips validation."""

from __future__ import annotations

from dataclasses import replace

from jidocode.services.conversation.actor import ValidatedInput
from jidocode.services.conversation.codec import to_payload
from jidocode.services.conversation.core import Signal, normalize
from jidocode.shared.envelope import Envelope, decode, encode

P, C = "p1", "c1"


def _validated(text: str = "hi", id: str = "e1") -> Signal:
    """What ``send_event`` builds: the client's event validated, with the request as its cause."""
    raw = {
        "id": id,
        "type": "conversation.user.message",
        "source": "client/1",
        "data": {"text": text},
        "correlation_id": "k1",
        "causation_id": "req1",
        "time": "2026-01-01T00:00:00.000000Z",
    }
    return normalize(raw, external=True, max_data_bytes=1000)


def _arrived(signal: Signal) -> Envelope:
    """The message as the actor reads it from the input stream."""
    payload, headers = to_payload(signal, P, C)
    return decode(payload, headers)


def test_the_message_send_event_published_is_taken_as_validated_once() -> None:
    pending = ValidatedInput(P, C)
    signal = _validated()
    pending.expect(signal)
    env = _arrived(signal)
    taken = pending.take(env)
    assert taken is signal
    # exactly what validating the message would give
    assert taken == normalize(env.to_dict(), external=True, max_data_bytes=1000)
    assert len(pending) == 0 and pending.take(env) is None  # a redelivery is validated


def test_a_message_that_differs_in_anything_is_not_taken() -> None:
    pending = ValidatedInput(P, C)
    signal = _validated()
    pending.expect(signal)
    env = _arrived(signal)
    forged = [
        replace(env, data={}),  # malformed: it must reach validation and be rejected there
        replace(env, data={"text": "other"}),
        replace(env, type="conversation.tool.completed"),  # an internal type, from outside
        replace(env, source="someone/else"),
        replace(env, time=None),
        env.with_extensions(correlation_id="k2"),
        env.with_extensions(causation_id=None),
        env.with_extensions(conversation_id="c2"),
        decode(encode(Envelope(id=env.id, source=env.source, type=env.type, data=env.data))[0]),
    ]
    for other in forged:
        assert pending.take(other) is None, other
    assert pending.take(env) is signal  # the real message is still recognised


def test_another_conversation_does_not_take_it() -> None:
    pending = ValidatedInput(P, "c2")
    signal = _validated()
    pending.expect(signal)
    assert pending.take(_arrived(signal)) is None


def test_a_failed_publish_is_discarded_and_the_oldest_gives_way() -> None:
    pending = ValidatedInput(P, C, limit=2)
    first, second, third = (_validated(id=f"e{i}") for i in range(3))
    pending.expect(first)
    pending.discard(first.id)
    assert pending.take(_arrived(first)) is None
    for signal in (first, second, third):
        pending.expect(signal)
    assert len(pending) == 2
    assert pending.take(_arrived(first)) is None  # dropped: its message will be validated
    assert pending.take(_arrived(third)) is third and pending.take(_arrived(second)) is second
