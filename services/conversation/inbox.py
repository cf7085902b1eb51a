"""What reaches a conversation's actor from outside: validated input kept by this replica,
and the journal entry that names an input the actor refused."""

from __future__ import annotations

from collections import OrderedDict
from typing import Any, Final

from jidocode.shared.envelope import Envelope, now_iso
from jidocode.shared.errors import JidoError
from jidocode.shared.events.conversation import ConversationError

from .codec import to_envelope
from .core import Signal

__all__ = ["INGEST_SOURCE", "MAX_VALIDATED_PENDING", "ValidatedInput", "rejection"]

#: Source of the entries that name an input the actor refused.
INGEST_SOURCE: Final = "conversation/ingest"

#: Validated input kept for its message to arrive, per conversation (the oldest is dropped first).
MAX_VALIDATED_PENDING: Final = 256


class ValidatedInput:
    """Input that this replica's ``send_event`` validated and is publishing, by event id.

    The actor takes an arriving message as the validated signal only when it is
    exactly the envelope ``send_event`` published for it (:func:`to_envelope` of
    the signal): trust goes by content, never by a mark on the message, since
    anyone allowed to publish conversation input could set a mark. A message
    with the id of a pending signal but anything else different is validated
    like any outside input, and the pending signal stays for its own message.

    Bounded: an entry whose message never comes (a copy the stream's duplicate
    window dropped) gives way to newer ones; its message, should it still come,
    is then validated in the actor.
    """

    def __init__(self, project_id: str, conversation_id: str, *, limit: int = MAX_VALIDATED_PENDING) -> None:
        self.project_id = project_id
        self.conversation_id = conversation_id
        self.limit = limit
        self._pending: OrderedDict[str, Signal] = OrderedDict()

    def __len__(self) -> int:
        return len(self._pending)

    def expect(self, signal: Signal) -> None:
        """``signal`` was validated and is being published to the conversation's input."""
        self._pending[signal.id] = signal
        self._pending.move_to_end(signal.id)
        while len(self._pending) > self.limit:
            self._pending.popitem(last=False)

    def discard(self, signal_id: str) -> None:
        """The publish of ``signal_id`` failed: nothing to wait for."""
        self._pending.pop(signal_id, None)

    def take(self, env: Envelope) -> Signal | None:
        """The validated signal ``env`` carries unchanged, or ``None`` (then validate ``env``)."""
        signal = self._pending.get(env.id)
        if signal is not None and "traceparent" in env.extensions:  # the trace context is no content
            env = env.with_extensions(traceparent=None, tracestate=None)
        if signal is None or to_envelope(signal, self.project_id, self.conversation_id) != env:
            return None
        del self._pending[env.id]
        return signal


def rejection(exc: JidoError, seq: int, raw: dict[str, Any], project_id: str, conversation_id: str) -> Signal:
    """The entry naming input ``seq`` of the conversation's input stream, refused with ``exc``
    (``raw``: the envelope as far as it could be read)."""
    rid = f"{project_id}:{conversation_id}:in:{seq}"
    corr = raw.get("correlationid") or raw.get("id") or rid
    details = {**exc.details, "input_sequence": seq}
    if raw.get("id"):
        details["rejected_id"] = raw["id"]
    return Signal.of(
        ConversationError(error_type=exc.type, message=exc.message, details=details),
        id=rid,
        source=INGEST_SOURCE,
        correlation_id=str(corr),
        causation_id=str(raw["id"]) if raw.get("id") else None,
        time=now_iso(),
    )
