"""Signals on the wire: a :class:`Signal` is carried as a CloudEvent envelope."""

from __future__ import annotations

from typing import Any

from jidocode.shared.envelope import MSG_ID_HEADER, Envelope, encode

from .core import Signal

__all__ = ["from_envelope", "journal_msg_id", "to_envelope", "to_payload"]


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


def to_payload(signal: Signal, project_id: str, conversation_id: str) -> tuple[bytes, dict[str, str]]:
    payload, _ = encode(to_envelope(signal, project_id, conversation_id))
    return payload, {MSG_ID_HEADER: journal_msg_id(project_id, conversation_id, signal.id)}
