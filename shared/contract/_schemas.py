"""JSON schemas of the contract: the CloudEvent envelope and each model's ``data``.

Pydantic writes each model's schema; nested models become shared component
schemas (``#/components/schemas/<Model>``), and the top-level model loses its
``type`` field, which travels as the CloudEvent ``type`` attribute, not in
``data``.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from typing import Any, Final

from pydantic import BaseModel
from pydantic.json_schema import GenerateJsonSchema

from jidocode.shared.envelope import CONTENT_TYPE_JSON, CONTENT_TYPE_STRUCTURED, EXTENSIONS, SPECVERSION

__all__ = ["REF_PREFIX", "cloudevent_schema", "data_schema", "describe"]

REF_PREFIX: Final = "#/components/schemas/"

#: What each of our extension attributes means (every name of ``envelope.EXTENSIONS``).
_EXTENSION_DOCS: Final[Mapping[str, str]] = {
    "projectid": "The project the event belongs to. On a request, the project in the subject wins: "
    "a `projectid` naming another project is refused.",
    "conversationid": "The conversation the event belongs to.",
    "correlationid": "Shared by every event of one exchange: a reply carries its request's, and every "
    "output caused by a conversation input carries that input's (the `send_event` request's "
    "`correlationid`, else the input event's id).",
    "causationid": "The id of the event that caused this one (a reply names its request; an output "
    "entry names the entry or input it follows).",
    "traceparent": "W3C Trace Context of the exchange; carried along, not interpreted.",
    "dataref": "A reference to data stored elsewhere (claim check). Reserved: no service sets it yet.",
}


class _Schemas(GenerateJsonSchema):
    """Pydantic's generator without a ``title`` on every field (the field name says it)."""

    def field_title_should_be_set(self, schema: Any) -> bool:
        return False


def describe(obj: type[Any]) -> str | None:
    """The class's own docstring in CommonMark (reST double backticks become single), or ``None``."""
    doc = obj.__dict__.get("__doc__")
    if not doc:
        return None
    return inspect.cleandoc(doc).replace("``", "`")


def data_schema(model: type[BaseModel], *, keep_type: bool = False) -> tuple[dict[str, Any], dict[str, Any]]:
    """The schema of ``model``'s CloudEvent ``data`` and the schemas of the models nested in it.

    ``type`` is dropped (it is the CloudEvent ``type``) unless ``keep_type``
    (the error event's data has a ``type`` of its own). Nested models are
    ``$ref``\\ s to ``#/components/schemas/<Model>``; the second value maps
    their names to their schemas.
    """
    schema = model.model_json_schema(ref_template=REF_PREFIX + "{model}", schema_generator=_Schemas)
    nested = schema.pop("$defs", {})
    properties = dict(schema.get("properties", {}))
    required = list(schema.get("required", []))
    if not keep_type:
        properties.pop("type", None)
        required = [name for name in required if name != "type"]
    data: dict[str, Any] = {"type": "object", "properties": properties}
    if required:
        data["required"] = required
    return data, {name: _clean(value) for name, value in nested.items()}


def _clean(schema: dict[str, Any]) -> dict[str, Any]:
    """A nested model's schema with its description in CommonMark."""
    out = dict(schema)
    if isinstance(out.get("description"), str):
        out["description"] = out["description"].replace("``", "`")
    return out


def cloudevent_schema() -> dict[str, Any]:
    """The CloudEvents 1.0 JSON event format as JidoCode uses it (structured mode)."""
    properties: dict[str, Any] = {
        "specversion": {"type": "string", "const": SPECVERSION},
        "id": {
            "type": "string",
            "minLength": 1,
            "description": "Unique per source; ours are ULIDs. Receivers dedupe by it: an event seen "
            "live and again in a replay has the same id.",
        },
        "source": {
            "type": "string",
            "minLength": 1,
            "description": "Who sent it: `<service>/<instance>` for JidoCode's services.",
        },
        "type": {"type": "string", "minLength": 1, "description": "The catalogue type of `data`."},
        "time": {"type": "string", "format": "date-time"},
        "subject": {"type": "string"},
        "datacontenttype": {"type": "string", "default": CONTENT_TYPE_JSON},
        "dataschema": {"type": "string"},
    }
    for name in EXTENSIONS.values():
        properties[name] = {"type": "string", "description": _EXTENSION_DOCS[name]}
    properties["data"] = {"description": "The event's fields: the schema of its message's type."}
    return {
        "title": "CloudEvent",
        "description": (
            f"A CloudEvents 1.0 event in structured mode (`{CONTENT_TYPE_STRUCTURED}`): the NATS "
            "payload is this JSON object and the event's fields are inside `data`. Binary mode is "
            "accepted on input: the attributes as lowercase `ce-<name>` headers (`ce-specversion`, "
            "`ce-id`, `ce-source`, `ce-type`, `ce-correlationid`, ...), `ce-datacontenttype` or "
            "`content-type` naming the payload, which is `data` alone. JetStream publishes carry a "
            "`Nats-Msg-Id` header for the server's duplicate window. Other extension attributes "
            "are strings named with 1-20 characters of lowercase a-z and 0-9."
        ),
        "type": "object",
        "required": ["specversion", "id", "source", "type", "data"],
        "properties": properties,
        "additionalProperties": {"type": "string"},
    }
