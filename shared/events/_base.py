"""The base of every event model in the catalogue, and of every command.

A command (a request body) names the model of its reply in its base class::

    class StartProject(Command[ProjectInfo]):
        type: Literal["engine.start_project"] = "engine.start_project"

so ``Bus.call(subject, StartProject(...))`` is typed as returning a
``ProjectInfo``, and ``StartProject.reply is ProjectInfo`` at run time (the
service host checks every handler's answer against it, and the AsyncAPI
document pairs each request with its reply from it).
"""

from __future__ import annotations

from typing import Any, ClassVar, Generic, TypeVar

from pydantic import BaseModel, ConfigDict

__all__ = ["Command", "EventModel", "R"]


class EventModel(BaseModel):
    """The ``data`` of one CloudEvent type, with its ``type`` as a ``Literal`` field.

    Subclasses declare ``type: Literal["some.type"] = "some.type"``. The type
    travels as the CloudEvent ``type`` attribute; everything else is ``data``.
    Unknown fields are ignored so that services of neighbouring versions can
    talk; missing or mistyped fields are a validation error naming the field.
    """

    # defer_build: a model's validator is built when first used, not at import, so a CLI
    # command builds the few it uses instead of the whole catalogue (decision 0312)
    model_config = ConfigDict(frozen=True, extra="ignore", defer_build=True)

    type: str
    #: Where the event is published: "signal" (jido.sig.*), "conversation"
    #: (jido.evt.*), "command" (a request body), "reply" or "hook".
    channel: ClassVar[str] = "signal"
    #: The model's CloudEvent type, read from its ``Literal`` default (the one place
    #: the name is written): code matches ``env.type == UserMessage.TYPE``, never a string.
    TYPE: ClassVar[str]

    @classmethod
    def __pydantic_init_subclass__(cls, **kwargs: Any) -> None:
        super().__pydantic_init_subclass__(**kwargs)
        default = cls.model_fields["type"].default
        if isinstance(default, str):
            cls.TYPE = default

    def to_data(self) -> dict[str, Any]:
        """The CloudEvent ``data`` of this event (everything but ``type``)."""
        return self.model_dump(mode="json", exclude={"type"})


R = TypeVar("R", bound=EventModel)


class Command(EventModel, Generic[R]):
    """A request body whose successful reply is an ``R`` (see the module docstring)."""

    channel: ClassVar[str] = "command"
    #: The reply model, taken from the ``Command[Reply]`` base of each concrete command.
    reply: ClassVar[type[EventModel]]

    @classmethod
    def __pydantic_init_subclass__(cls, **kwargs: Any) -> None:
        super().__pydantic_init_subclass__(**kwargs)
        for klass in cls.__mro__:
            meta = getattr(klass, "__pydantic_generic_metadata__", None)
            if meta and meta.get("origin") is Command and meta.get("args"):
                reply = meta["args"][0]
                if isinstance(reply, type) and issubclass(reply, EventModel):
                    cls.reply = reply
                return
