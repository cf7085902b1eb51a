"""Signals on the wire: a :class:`Signal` is carried as a CloudEvent envelope."""

from __future__ import annotations

from typing import Any

from jidocode.shared.envelope import MSG_ID_HEADER, Envelope, encode

from .core import Signal

__all__ = ["from_envelope", "input_msg_id", "input_payload", "journal_msg_id", "to_envelope", "to_payload"]


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
