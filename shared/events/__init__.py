"""The one catalogue of JidoCode event types.

Every CloudEvent type is a pydantic model with a ``Literal`` ``type`` field
(see :class:`EventModel`), defined in the module of its domain
(``engine``, ``conversation``, ``tools``, ``assets``, ``llm``, ``common``) and
decoded through one discriminated union, :data:`AnyEvent`. Type names are a
wire contract: add, never rename. A command (request body) subclasses
``Command[Reply]`` and so names the model of its successful reply.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING, Annotated, Any, Union

from pydantic import Field, ValidationError

from jidocode.shared.errors import InvalidInput

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

#: The domain modules, in catalogue order. They are imported when the catalogue is first
#: needed (a command that only prints its help never builds 150 models: issue 25, point 4).
DOMAINS = ("common", "engine", "conversation", "tools", "assets", "llm", "telemetry", "mcp", "prd")


def _type_of(cls: type[EventModel]) -> str:
    default = cls.model_fields["type"].default
    if not isinstance(default, str):
        raise TypeError(f"{cls.__name__} must give its Literal type a default")
    return default


@dataclass(frozen=True)
class Catalogue:
    """Every event model, by type, checked: each type defined once, each command naming a reply."""

    events: tuple[type[EventModel], ...]
    by_type: dict[str, type[EventModel]]
    commands: tuple[type[Command[Any]], ...]


def build_catalogue(events: tuple[type[EventModel], ...]) -> Catalogue:
    """The catalogue of ``events``; ``TypeError`` naming a type defined twice or a command
    without a catalogue reply."""
    by_type: dict[str, type[EventModel]] = {}
    for cls in events:
        t = _type_of(cls)
        if t in by_type:
            raise TypeError(f"event type {t!r} is defined twice: {by_type[t].__name__} and {cls.__name__}")
        by_type[t] = cls
    commands: tuple[type[Command[Any]], ...] = tuple(c for c in events if issubclass(c, Command))
    for cmd in commands:
        if not hasattr(cmd, "reply") or cmd.reply not in events:
            raise TypeError(f"command {cmd.__name__} must name a catalogue reply model: Command[Reply]")
    return Catalogue(events, by_type, commands)


@cache
def catalogue() -> Catalogue:
    """The one catalogue, built on first use from :data:`DOMAINS`."""
    modules = [importlib.import_module(f"{__name__}.{name}") for name in DOMAINS]
    return build_catalogue(tuple(cls for module in modules for cls in module.EVENTS))


if TYPE_CHECKING:
    ALL_EVENTS: tuple[type[EventModel], ...]
    #: Every command (request body) of the catalogue; each names its reply in ``reply``.
    COMMANDS: tuple[type[Command[Any]], ...]
    EVENT_TYPES: frozenset[str]
    AnyEvent: Any


def __getattr__(name: str) -> Any:
    """The catalogue's names, built on first use (and submodules, imported on first use)."""
    if name == "ALL_EVENTS":
        return catalogue().events
    if name == "COMMANDS":
        return catalogue().commands
    if name == "EVENT_TYPES":
        return frozenset(catalogue().by_type)
    if name == "AnyEvent":
        return Annotated[Union[catalogue().events], Field(discriminator="type")]  # noqa: UP007
    if name in DOMAINS:
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def event_class(event_type: str) -> type[EventModel] | None:
    """The model of ``event_type``, or ``None`` when the catalogue has no such type."""
    return catalogue().by_type.get(event_type)


def parse_event(event_type: str, data: Any) -> EventModel:
    """Validate ``data`` as the event ``event_type``.

    Raises :class:`InvalidInput` naming the unknown type or the bad fields.
    """
    cls = catalogue().by_type.get(event_type)
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
