"""The base of every event model in the catalogue."""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict

__all__ = ["EventModel"]


class EventModel(BaseModel):
    """The ``data`` of one CloudEvent type, with its ``type`` as a ``Literal`` field.

    Subclasses declare ``type: Literal["some.type"] = "some.type"``. The type
    travels as the CloudEvent ``type`` attribute; everything else is ``data``.
    Unknown fields are ignored so that services of neighbouring versions can
    talk; missing or mistyped fields are a validation error naming the field.
    """

    model_config = ConfigDict(frozen=True, extra="ignore")

    type: str
    #: Where the event is published: "signal" (jido.sig.*), "conversation"
    #: (jido.evt.*), "command" (a request body), "reply" or "hook".
    channel: ClassVar[str] = "signal"

    def to_data(self) -> dict[str, Any]:
        """The CloudEvent ``data`` of this event (everything but ``type``)."""
        return self.model_dump(mode="json", exclude={"type"})
