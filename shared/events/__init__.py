"""The one catalogue of JidoCode event types.

Every CloudEvent type is a pydantic model with a ``Literal`` ``type`` field
(see :class:`EventModel`), defined in the module of its domain
(``engine``, ``conversation``, ``tools``, ``assets``, ``llm``, ``common``) and
decoded through one discriminated union, :data:`AnyEvent`. Type names are a
wire contract: add, never rename. A command (request body) subclasses
``Command[Reply]`` and so names the model of its successful reply.
"""

from __future__ import annotations

from typing import Annotated, Any, Union

from pydantic import Field, ValidationError

from jidocode.shared.errors import InvalidInput

from . import assets, common, conversation, engine, llm, prd, telemetry, tools
from . import mcp as mcp_events
from ._base import Command, EventModel, R
from .common import ERROR_TYPE

__all__ = [
    "ALL_EVENTS",
    "COMMANDS",
    "ERROR_TYPE",
    "EVENT_TYPES",
    "AnyEvent",
    "Command",
    "EventModel",
    "R",
    "event_class",
    "parse_event",
]

ALL_EVENTS: tuple[type[EventModel], ...] = (
    *common.EVENTS,
    *engine.EVENTS,
    *conversation.EVENTS,
    *tools.EVENTS,
    *assets.EVENTS,
    *llm.EVENTS,
    *telemetry.EVENTS,
    *mcp_events.EVENTS,
    *prd.EVENTS,
)


def _type_of(cls: type[EventModel]) -> str:
    default = cls.model_fields["type"].default
    if not isinstance(default, str):
        raise TypeError(f"{cls.__name__} must give its Literal type a default")
    return default


_BY_TYPE: dict[str, type[EventModel]] = {}
for _cls in ALL_EVENTS:
    _t = _type_of(_cls)
    if _t in _BY_TYPE:
        raise TypeError(f"event type {_t!r} is defined twice: {_BY_TYPE[_t].__name__} and {_cls.__name__}")
    _BY_TYPE[_t] = _cls

EVENT_TYPES: frozenset[str] = frozenset(_BY_TYPE)

#: Every command (request body) of the catalogue; each names its reply in ``reply``.
COMMANDS: tuple[type[Command[Any]], ...] = tuple(c for c in ALL_EVENTS if issubclass(c, Command))
for _cmd in COMMANDS:
    if not hasattr(_cmd, "reply") or _cmd.reply not in ALL_EVENTS:
        raise TypeError(f"command {_cmd.__name__} must name a catalogue reply model: Command[Reply]")

AnyEvent = Annotated[Union[ALL_EVENTS], Field(discriminator="type")]  # type: ignore[valid-type]  # noqa: UP007


def event_class(event_type: str) -> type[EventModel] | None:
    """The model of ``event_type``, or ``None`` when the catalogue has no such type."""
    return _BY_TYPE.get(event_type)


def parse_event(event_type: str, data: Any) -> EventModel:
    """Validate ``data`` as the event ``event_type``.

    Raises :class:`InvalidInput` naming the unknown type or the bad fields.
    """
    cls = _BY_TYPE.get(event_type)
    if cls is None:
        raise InvalidInput(f"unknown event type {event_type!r}", details={"type": event_type})
    if not isinstance(data, dict):
        raise InvalidInput(
            f"event {event_type!r} needs an object in data, got {type(data).__name__}",
            details={"type": event_type},
        )
    try:
        return cls.model_validate({**data, "type": event_type})
    except ValidationError as exc:
        problems = [
            {"field": ".".join(str(p) for p in err["loc"]), "problem": err["msg"]} for err in exc.errors()
        ]
        summary = "; ".join(f"{p['field']}: {p['problem']}" for p in problems)
        raise InvalidInput(
            f"invalid data for {event_type!r}: {summary}", details={"type": event_type, "errors": problems}
        ) from None
