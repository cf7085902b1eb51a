"""The signal: one immutable conversation event as the core sees it, and edge normalization.

Normalization is where correlation ids are ensured and the external contract
is enforced; it is pure (no clock, no random): ``time`` is taken as given.
"""

from __future__ import annotations

import builtins
import json
from collections.abc import Mapping
from functools import cache
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, PrivateAttr

from jidocode.shared.errors import InvalidInput, JidoError, MissingDataEnvelope, PayloadTooLarge
from jidocode.shared.events import EventModel, event_class, parse_event
from jidocode.shared.events.conversation import EXTERNAL_TYPES

__all__ = ["Signal", "normalize"]

E = TypeVar("E", bound=EventModel)

_CONTEXT = frozenset(
    {"id", "type", "source", "specversion", "time", "subject", "datacontenttype", "dataschema"}
)


class Signal(BaseModel):
    """An applied or queued conversation signal (a timeline entry once applied).

    ``data`` is the validated payload of the catalogue type ``type`` (what is journaled and
    published); :attr:`event` is the same payload as the catalogue's typed model, decoded once
    (at the edge by :func:`normalize` and :meth:`of`, else on first use) and kept: the core
    reads entries through it, never through ``data``. ``correlation_id`` is never empty
    (ensured at the edge), ``causation_id`` names the signal that caused this one (``None``
    for outside input). Equality is that of the fields (the decoded model is a cache).
    """

    model_config = ConfigDict(frozen=True)

    _event: EventModel | None = PrivateAttr(default=None)
    #: From our own journal (:meth:`trusted`): its event is built without validation.
    _trusted: bool = PrivateAttr(default=False)

    id: str
    type: str
    source: str
    data: dict[str, Any]
    correlation_id: str
    causation_id: str | None = None
    time: str | None = None

    @classmethod
    def trusted(
        cls,
        *,
        id: str,
        type: str,
        source: str,
        data: dict[str, Any],
        correlation_id: str,
        causation_id: str | None,
        time: str | None,
    ) -> Signal:
        """A signal from our own journal, built without validation.

        Rebuilding a conversation reads every entry of its journal, which this
        service wrote itself; ``model_construct`` costs about 10 µs an entry,
        this about 3 µs (it fills exactly the slots ``model_construct`` fills).
        """
        obj = cls.__new__(cls)
        object.__setattr__(
            obj,
            "__dict__",
            {
                "id": id,
                "type": type,
                "source": source,
                "data": data,
                "correlation_id": correlation_id,
                "causation_id": causation_id,
                "time": time,
            },
        )
        object.__setattr__(obj, "__pydantic_fields_set__", set(_ALL_FIELDS))
        object.__setattr__(obj, "__pydantic_extra__", None)
        object.__setattr__(obj, "__pydantic_private__", {"_event": None, "_trusted": True})
        return obj

    @classmethod
    def of(
        cls,
        event: EventModel,
        *,
        id: str,
        source: str,
        correlation_id: str,
        causation_id: str | None = None,
        time: str | None = None,
    ) -> Signal:
        """The signal carrying the catalogue event ``event`` (its type and its data)."""
        signal = cls(
            id=id,
            type=event.type,
            source=source,
            data=event.to_data(),
            correlation_id=correlation_id,
            causation_id=causation_id,
            time=time,
        )
        signal._private()["_event"] = event
        return signal

    @property
    def event(self) -> EventModel:
        """The payload as the catalogue's model of ``type`` (decoded on first use, then kept).

        Raises :class:`InvalidInput` naming the type or the fields when ``data`` is not one.
        """
        private = self._private()  # read directly: pydantic's private attribute access is slow
        event: EventModel | None = private["_event"]
        if event is None:
            cls = event_class(self.type) if private["_trusted"] else None
            event = parse_event(self.type, self.data) if cls is None else _built(cls, self.data)
            private["_event"] = event
        return event

    def _private(self) -> dict[str, Any]:
        private = self.__pydantic_private__
        assert private is not None
        return private

    def event_as(self, model: builtins.type[E]) -> E:
        """:attr:`event`, which must be a ``model`` (a core invariant: :class:`TypeError` if not)."""
        event = self.event
        if not isinstance(event, model):
            raise TypeError(f"entry {self.id!r} is a {self.type!r}, not a {model.TYPE!r}")
        return event

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Signal):
            return NotImplemented
        return self.__dict__ == other.__dict__

    __hash__ = None  # type: ignore[assignment]  # data is a dict: as unhashable as pydantic made it

    def key(self) -> tuple[str, str]:
        """The dedup key: ``(id, correlation_id)``."""
        return (self.id, self.correlation_id)

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "type": self.type,
            "source": self.source,
            "time": self.time,
            "correlation_id": self.correlation_id,
            "causation_id": self.causation_id,
            "data": self.data,
        }


def normalize(raw: Mapping[str, Any], *, external: bool, max_data_bytes: int | None = None) -> Signal:
    """Turn a raw event (CloudEvent-shaped mapping) into a :class:`Signal`.

    The payload is read only from ``data``: a flat payload raises
    :class:`MissingDataEnvelope`. ``external=True`` accepts only
    :data:`EXTERNAL_TYPES`. Data is validated against the catalogue
    (:class:`InvalidInput`) and capped at ``max_data_bytes``
    (:class:`PayloadTooLarge`). The correlation id defaults to the signal id.
    """
    sig_id = raw.get("id")
    sig_type = raw.get("type")
    if not isinstance(sig_id, str) or not sig_id:
        raise InvalidInput("signal has no id", details={"field": "id"})
    if not isinstance(sig_type, str) or not sig_type:
        raise InvalidInput("signal has no type", details={"field": "type", "id": sig_id})
    if "data" not in raw:
        flat = sorted(
            k
            for k in raw
            if k not in _CONTEXT
            and k not in {"correlation_id", "causation_id", "correlationid", "causationid"}
        )
        raise MissingDataEnvelope(
            f"signal {sig_type!r} has no 'data': the payload must be inside 'data'",
            details={"id": sig_id, "type": sig_type, "top_level_fields": flat},
        )
    if external and sig_type not in EXTERNAL_TYPES:
        raise InvalidInput(
            f"signal type {sig_type!r} is not accepted from outside; accepted: {sorted(EXTERNAL_TYPES)}",
            details={"id": sig_id, "type": sig_type, "accepted": sorted(EXTERNAL_TYPES)},
        )
    data = raw["data"] if raw["data"] is not None else {}
    if max_data_bytes is not None:
        size = len(json.dumps(data, separators=(",", ":"), ensure_ascii=False, default=str).encode())
        if size > max_data_bytes:
            raise PayloadTooLarge(
                f"signal data of {size} bytes is over the limit of {max_data_bytes} bytes",
                details={"id": sig_id, "size": size, "limit": max_data_bytes},
            )
    try:
        model = parse_event(sig_type, data)
    except JidoError as exc:
        exc.details.setdefault("id", sig_id)
        raise
    correlation = raw.get("correlation_id") or raw.get("correlationid") or sig_id
    causation = raw.get("causation_id") or raw.get("causationid") or None
    source = raw.get("source") or "unknown"
    time = raw.get("time")
    signal = Signal(
        id=sig_id,
        type=sig_type,
        source=str(source),
        data=model.to_data(),
        correlation_id=str(correlation),
        causation_id=None if causation is None else str(causation),
        time=None if time is None else str(time),
    )
    signal._private()["_event"] = model  # decoded once, here at the edge
    return signal


_ALL_FIELDS: frozenset[str] = frozenset(Signal.model_fields)


@cache
def _shape(cls: type[EventModel]) -> tuple[frozenset[str], dict[str, Any]]:
    """The field names of ``cls`` and the defaults of those that have one."""
    defaults: dict[str, Any] = {}
    for name, info in cls.model_fields.items():
        if info.default_factory is not None:
            defaults[name] = info.default_factory()  # type: ignore[call-arg]
        elif not info.is_required():
            defaults[name] = info.default
    return frozenset(cls.model_fields), defaults


def _built(cls: type[EventModel], data: dict[str, Any]) -> EventModel:
    """The event ``cls`` of ``data`` from our own journal, without validation.

    The journal holds what a validated model dumped, so only a field added since is missing
    (its default is taken). About a third of what validation costs: a rebuild reads every
    entry of a conversation. The defaults are shared between events: the core never changes
    an event (they are frozen).
    """
    fields, defaults = _shape(cls)
    values = {**defaults, **(data if data.keys() <= fields else {k: data[k] for k in data if k in fields})}
    values["type"] = cls.TYPE
    obj = cls.__new__(cls)
    object.__setattr__(obj, "__dict__", values)
    object.__setattr__(obj, "__pydantic_fields_set__", set(data))
    object.__setattr__(obj, "__pydantic_extra__", None)
    object.__setattr__(obj, "__pydantic_private__", None)
    return obj
