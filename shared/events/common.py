"""Event types every service uses: the error event and the generic reply."""

from __future__ import annotations

from typing import Any, ClassVar, Final, Literal

from ._base import EventModel

__all__ = ["ERROR_TYPE", "EVENTS", "Reply"]

#: CloudEvent type of an error event. Its data is ``jidocode.shared.errors.ErrorInfo``
#: (``type``, ``message``, ``retryable``, ``details``); it is kept out of the
#: discriminated union because its data has a ``type`` field of its own.
ERROR_TYPE: Final = "error"


class Reply(EventModel):
    """A successful reply; ``result`` is described by the endpoint that sent it."""

    channel: ClassVar[str] = "reply"
    type: Literal["reply"] = "reply"
    result: Any = None


EVENTS: tuple[type[EventModel], ...] = (Reply,)
