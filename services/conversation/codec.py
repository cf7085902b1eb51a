"""Signals on the wire: a :class:`Signal` is carried as a CloudEvent envelope.

A journal message carries one or more entries (decision 0322)::

    {"format": 2, "entries": [<CloudEvent>, ...]}

Format 1, a journal written before, is one bare CloudEvent per message; it is
still read (:func:`journal_entries`). A format newer than :data:`JOURNAL_FORMAT`
fails closed, naming the version.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, Final

import orjson

from jidocode.shared.envelope import MAX_PAYLOAD_BYTES, MSG_ID_HEADER, Envelope, encode
from jidocode.shared.errors import JidoError

from .core import Signal

__all__ = [
    "JOURNAL_FORMAT",
    "from_envelope",
    "input_msg_id",
    "input_payload",
    "journal_entries",
    "journal_messages",
    "journal_msg_id",
    "to_envelope",
    "to_payload",
]

#: The journal message format this code writes (1: one bare CloudEvent a message, still read).
JOURNAL_FORMAT: Final = 2
_HEAD: Final = b'{"format":2,"entries":['
_TAIL: Final = b"]}"


def to_envelope(signal: Signal, project_id: str, conversation_id: str) -> Envelope:
    ext = {"projectid": project_id, "conversationid": conversation_id, "correlationid": signal.correlation_id}
    if signal.causation_id:
        ext["causationid"] = signal.causation_id
    return Envelope(
        id=signal.id,
        source=signal.source,
        type=signal.type,
        data=signal.data,
        time=signal.time,
        extensions=ext,
    )


def from_envelope(env: Envelope) -> Signal:
    data: Any = env.data
    return Signal(
        id=env.id,
        type=env.type,
        source=env.source,
        data=data if isinstance(data, dict) else {},
        correlation_id=env.correlation_id or env.id,
        causation_id=env.causation_id,
        time=env.time,
    )


def journal_msg_id(project_id: str, conversation_id: str, signal_id: str) -> str:
    """``Nats-Msg-Id`` of a journal or output message: the signal id, scoped to its conversation.

    Scoping keeps a client that reuses an event id in two conversations from
    having one of them dropped by the stream's duplicate window.
    """
    return f"{project_id}/{conversation_id}/{signal_id}"


def input_msg_id(project_id: str, conversation_id: str, signal: Signal) -> str:
    """``Nats-Msg-Id`` of an input message: the reducer's dedup key ``(id, correlation_id)``,
    scoped to its conversation. The stream's duplicate window and the reducer then agree: two
    inputs with one id but different correlation ids are both kept by both; a copy of one input
    is dropped by the stream (within its window) and by the reducer (always)."""
    return f"{journal_msg_id(project_id, conversation_id, signal.id)}|{signal.correlation_id}"


def input_payload(
    signal: Signal, project_id: str, conversation_id: str, trace: dict[str, str] | None = None
) -> tuple[bytes, dict[str, str]]:
    """The message of an input ``signal`` on the conversation's input subject (``trace``: the
    ``traceparent``/``tracestate`` extensions of the request that sent it, when traced)."""
    env = to_envelope(signal, project_id, conversation_id)
    payload, _ = encode(env.with_extensions(**trace) if trace else env)
    return payload, {MSG_ID_HEADER: input_msg_id(project_id, conversation_id, signal)}


def to_payload(signal: Signal, project_id: str, conversation_id: str) -> tuple[bytes, dict[str, str]]:
    payload, _ = encode(to_envelope(signal, project_id, conversation_id))
    return payload, {MSG_ID_HEADER: journal_msg_id(project_id, conversation_id, signal.id)}


def journal_messages(
    entries: Sequence[Signal], project_id: str, conversation_id: str, *, max_bytes: int = MAX_PAYLOAD_BYTES
) -> Iterator[tuple[bytes, dict[str, str]]]:
    """``entries`` packed into as few journal messages as fit ``max_bytes`` each, in order.

    Each message's ``Nats-Msg-Id`` is its first entry's (:func:`journal_msg_id`), with
    ``+<count>`` when it carries more than one: a retried append is the same message.
    An entry too large to share a message goes alone (it fits: :func:`to_payload` checks).
    """
    chunk: list[tuple[Signal, bytes]] = []
    size = len(_HEAD) + len(_TAIL)
    for entry in entries:
        payload, _ = to_payload(entry, project_id, conversation_id)
        if chunk and size + len(payload) + 1 > max_bytes:
            yield _journal_message(chunk, project_id, conversation_id)
            chunk, size = [], len(_HEAD) + len(_TAIL)
        chunk.append((entry, payload))
        size += len(payload) + 1
    if chunk:
        yield _journal_message(chunk, project_id, conversation_id)


def _journal_message(
    chunk: list[tuple[Signal, bytes]], project_id: str, conversation_id: str
) -> tuple[bytes, dict[str, str]]:
    msg_id = journal_msg_id(project_id, conversation_id, chunk[0][0].id)
    if len(chunk) > 1:
        msg_id = f"{msg_id}+{len(chunk)}"
    return _HEAD + b",".join(payload for _, payload in chunk) + _TAIL, {MSG_ID_HEADER: msg_id}


def journal_entries(payload: bytes) -> list[Signal]:
    """The entries of one journal message (this service wrote it: read without re-validation).

    Reads format 2 (several entries) and format 1 (one bare CloudEvent); raises
    :class:`JidoError` (``journal_corrupt``) for anything else.
    """
    raw = orjson.loads(payload)
    if not isinstance(raw, dict):
        raise _corrupt(f"a journal message is a JSON {type(raw).__name__}, not an object")
    if "specversion" in raw:  # format 1
        return [_trusted_signal(raw)]
    version = raw.get("format")
    if version != JOURNAL_FORMAT:
        raise _corrupt(
            f"journal message format {version!r} is not one this JidoCode reads "
            f"(1 or {JOURNAL_FORMAT}): written by a newer version?"
        )
    items = raw.get("entries")
    if not isinstance(items, list) or not items:
        raise _corrupt("a journal message of format 2 has no entries")
    return [_trusted_signal(item) for item in items]


def _trusted_signal(raw: Any) -> Signal:
    """One structured CloudEvent of the journal as a :class:`Signal`."""
    if not isinstance(raw, dict):
        raise _corrupt("a journal entry is not a JSON object")
    data = raw["data"]
    return Signal.trusted(
        id=raw["id"],
        type=raw["type"],
        source=raw["source"],
        data=data if isinstance(data, dict) else {},
        correlation_id=raw.get("correlationid") or raw["id"],
        causation_id=raw.get("causationid"),
        time=raw.get("time"),
    )


def _corrupt(message: str) -> JidoError:
    return JidoError(message, error_type="journal_corrupt")
