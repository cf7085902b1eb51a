"""The CloudEvents 1.0 envelope of every JidoCode message, and its NATS codec.

No Python SDK ships the CloudEvents NATS protocol binding, so this module is
that binding, written on the ``cloudevents`` package:

* **structured mode** (what we publish): the NATS payload is the JSON event
  format, ``application/cloudevents+json``. No header is needed, which keeps
  a request as cheap as a raw NATS request; JetStream publishes add
  ``Nats-Msg-Id`` = the event ``id`` so the server dedupes retries.
* **binary mode** (accepted on input): attributes in lowercase ``ce-*``
  headers, ``ce-datacontenttype`` (or ``content-type``) describing the payload,
  which is the event data itself. Attributes are validated by the SDK's
  ``CloudEvent``.

A message missing ``id``, ``source``, ``type`` or ``specversion`` is rejected
by looking at the raw message first (the SDK would invent an id). A payload
whose content is not inside ``data`` is rejected with ``missing_data_envelope``.

**One size limit**, :data:`MAX_PAYLOAD_BYTES`, bounds every message of the bus:
:func:`decode` and :func:`decode_reply` refuse a larger one, and :func:`encode`
and :func:`encode_event` refuse to make one, so a sender learns it before
publishing (``payload_too_large``, naming the size and the limit).
"""

from __future__ import annotations

import json
import random
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any, Final

import orjson
from cloudevents.core.exceptions import BaseCloudEventException
from cloudevents.core.v1.event import CloudEvent as SdkCloudEvent

from jidocode.shared.errors import InvalidEnvelope, JidoError, MissingDataEnvelope, PayloadTooLarge
from jidocode.shared.events import ERROR_TYPE, EventModel, parse_event

__all__ = [
    "CONTENT_TYPE_STRUCTURED",
    "EXTENSIONS",
    "MAX_PAYLOAD_BYTES",
    "MSG_ID_HEADER",
    "Envelope",
    "decode",
    "decode_reply",
    "encode",
    "encode_binary",
    "encode_event",
    "error_envelope",
    "new_id",
    "now_iso",
]

SPECVERSION: Final = "1.0"
CONTENT_TYPE_STRUCTURED: Final = "application/cloudevents+json"
CONTENT_TYPE_JSON: Final = "application/json"
MSG_ID_HEADER: Final = "Nats-Msg-Id"
#: The bus payload limit: the largest NATS payload (one encoded CloudEvent, headers not
#: counted) a JidoCode service sends or accepts. 960 KiB leaves 64 KiB for headers under NATS's
#: default ``max_payload`` of 1 MiB (which counts them); the servers we configure allow 1 MiB
#: (embedded) and 8 MiB (deploy/, k8s/). A service may take less (``ServiceHost.max_request_bytes``).
MAX_PAYLOAD_BYTES: Final = 960 * 1024

#: Our extension attributes, by keyword name.
EXTENSIONS: Final[Mapping[str, str]] = {
    "project_id": "projectid",
    "conversation_id": "conversationid",
    "correlation_id": "correlationid",
    "causation_id": "causationid",
    "traceparent": "traceparent",
    "dataref": "dataref",
}

_REQUIRED: Final = ("id", "source", "type", "specversion")
_CONTEXT_ATTRS: Final = frozenset(
    {"id", "source", "type", "specversion", "time", "subject", "datacontenttype", "dataschema"}
)
_EXT_NAME = re.compile(r"^[a-z0-9]{1,20}$")
_KNOWN_EXT: Final = frozenset(EXTENSIONS.values())
_TYPE_ONLY: Final = {"type"}
_CE_PREFIX: Final = "ce-"


_CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
_PAIRS = [a + b for a in _CROCKFORD for b in _CROCKFORD]
# The time parts change at most once a millisecond (ids) or second (timestamps): keep the last.
_last_ms: list[Any] = [-1, ""]
_last_sec: list[Any] = [-1, ""]


def new_id() -> str:
    """A new event id: a ULID (48-bit milliseconds + 80 random bits), sortable by creation time.

    Written out here because it is on every message's path: the 80 random bits
    are 8 pairs of Crockford characters, and the 10 time characters are reused
    within a millisecond. The same text as ``str(ulid.ULID())``.
    """
    ms = time.time_ns() // 1_000_000
    if ms != _last_ms[0]:
        # 10 Crockford characters = 2 bits of padding + 48 bits: 5 pairs of 10 bits each.
        _last_ms[1] = "".join(_PAIRS[(ms >> shift) & 0x3FF] for shift in (40, 30, 20, 10, 0))
        _last_ms[0] = ms
    p = _PAIRS
    # Not os.urandom: a syscall per id showed in profiles. Ids are unique, not secret
    # (anything that must be unguessable uses ``secrets``); ``random`` reseeds after fork.
    r = random.getrandbits(80)
    # One f-string builds the text at once (a chain of + made a string per step).
    return (
        f"{_last_ms[1]}{p[r >> 70]}{p[(r >> 60) & 0x3FF]}{p[(r >> 50) & 0x3FF]}{p[(r >> 40) & 0x3FF]}"
        f"{p[(r >> 30) & 0x3FF]}{p[(r >> 20) & 0x3FF]}{p[(r >> 10) & 0x3FF]}{p[r & 0x3FF]}"
    )


def now_iso() -> str:
    """Now in UTC, ISO 8601 with microseconds and ``Z`` (``2026-11-24T06:46:22.123456Z``)."""
    sec, ns = divmod(time.time_ns(), 1_000_000_000)
    if sec != _last_sec[0]:
        _last_sec[1] = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(sec))
        _last_sec[0] = sec
    return f"{_last_sec[1]}.{ns // 1000:06d}Z"


@dataclass(frozen=True, slots=True)
class Envelope:
    """One CloudEvent: context attributes, our extensions and ``data``."""

    id: str
    source: str
    type: str
    data: Any = None
    specversion: str = SPECVERSION
    time: str | None = None
    subject: str | None = None
    datacontenttype: str | None = CONTENT_TYPE_JSON
    dataschema: str | None = None
    extensions: Mapping[str, str] = field(default_factory=dict)
    #: The NATS subject the message arrived on (set on decode by the bus; not a CloudEvent attribute).
    nats_subject: str | None = field(default=None, compare=False)

    @classmethod
    def new(
        cls,
        event: EventModel,
        *,
        source: str,
        subject: str | None = None,
        id: str | None = None,
        project_id: str | None = None,
        conversation_id: str | None = None,
        correlation_id: str | None = None,
        causation_id: str | None = None,
        traceparent: str | None = None,
        dataref: str | None = None,
    ) -> Envelope:
        """Wrap a catalogue event; ``id`` (a ULID) and ``time`` are filled in."""
        ext: dict[str, str] = {}
        if project_id is not None:
            ext["projectid"] = project_id
        if conversation_id is not None:
            ext["conversationid"] = conversation_id
        if correlation_id is not None:
            ext["correlationid"] = correlation_id
        if causation_id is not None:
            ext["causationid"] = causation_id
        if traceparent is not None:
            ext["traceparent"] = traceparent
        if dataref is not None:
            ext["dataref"] = dataref
        return cls(
            id=id or new_id(),
            source=source,
            type=event.type,
            data=event.to_data(),
            time=now_iso(),
            subject=subject,
            extensions=ext,
        )

    @property
    def project_id(self) -> str | None:
        return self.extensions.get("projectid")

    @property
    def conversation_id(self) -> str | None:
        return self.extensions.get("conversationid")

    @property
    def correlation_id(self) -> str | None:
        return self.extensions.get("correlationid")

    @property
    def causation_id(self) -> str | None:
        return self.extensions.get("causationid")

    @property
    def traceparent(self) -> str | None:
        return self.extensions.get("traceparent")

    @property
    def dataref(self) -> str | None:
        return self.extensions.get("dataref")

    def event(self) -> EventModel:
        """The catalogue model of this event (raises ``InvalidInput``)."""
        return parse_event(self.type, self.data)

    def with_extensions(self, **values: str | None) -> Envelope:
        """A copy with extensions set (keyword names as in :data:`EXTENSIONS`; ``None`` removes)."""
        ext = dict(self.extensions)
        for key, value in values.items():
            name = EXTENSIONS.get(key, key)
            if value is None:
                ext.pop(name, None)
            else:
                ext[name] = value
        return replace(self, extensions=ext)

    def to_dict(self) -> dict[str, Any]:
        """The JSON event format of this event."""
        out: dict[str, Any] = {
            "specversion": self.specversion,
            "id": self.id,
            "source": self.source,
            "type": self.type,
        }
        if self.time is not None:
            out["time"] = self.time
        if self.subject is not None:
            out["subject"] = self.subject
        if self.datacontenttype is not None:
            out["datacontenttype"] = self.datacontenttype
        if self.dataschema is not None:
            out["dataschema"] = self.dataschema
        out.update(self.extensions)
        out["data"] = self.data
        return out


def error_envelope(source: str, error: JidoError, **ext: str | None) -> Envelope:
    """An ``error`` event whose data is the error's ``ErrorInfo`` (type, message, retryable, details)."""
    env = Envelope(
        id=new_id(),
        source=source,
        type=ERROR_TYPE,
        data=error.to_info().model_dump(mode="json"),
        time=now_iso(),
    )
    return env.with_extensions(**ext) if ext else env


def encode(
    envelope: Envelope, *, jetstream: bool = False, max_bytes: int = MAX_PAYLOAD_BYTES
) -> tuple[bytes, dict[str, str] | None]:
    """Structured mode: the payload and the headers to publish with it.

    Raises :class:`PayloadTooLarge` when the payload is over ``max_bytes``.
    """
    payload = _dumps(envelope.to_dict())
    _check_size(payload, envelope.type, max_bytes)
    return payload, ({MSG_ID_HEADER: envelope.id} if jetstream else None)


def _check_size(payload: bytes, event_type: str, max_bytes: int) -> None:
    """A message about to be sent fits the limit (checked here, so a sender knows before publishing)."""
    if len(payload) > max_bytes:
        raise PayloadTooLarge(
            f"{event_type!r} event of {len(payload)} bytes is over the limit of {max_bytes} bytes",
            details={"size": len(payload), "limit": max_bytes, "type": event_type},
        )


def _dumps(value: Any) -> bytes:
    """Compact UTF-8 JSON. orjson, because this runs for every message: the standard
    library's encoder cost a request/reply about a quarter of its latency here."""
    try:
        return orjson.dumps(value, option=orjson.OPT_NON_STR_KEYS)
    except orjson.JSONEncodeError:
        # what orjson refuses but json takes (integers over 64 bits): same text, slower
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()


def encode_event(
    event: EventModel,
    *,
    source: str,
    extensions: Mapping[str, str] | None = None,
    id: str | None = None,
    max_bytes: int = MAX_PAYLOAD_BYTES,
) -> tuple[str, bytes]:
    """Structured mode straight from a catalogue event: ``(event id, payload)``.

    The same bytes as ``encode(Envelope.new(event, …))`` without building the
    envelope: this is every request's and every reply's path. Raises
    :class:`PayloadTooLarge` when the payload is over ``max_bytes``.
    """
    event_id = id or new_id()
    out: dict[str, Any] = {
        "specversion": SPECVERSION,
        "id": event_id,
        "source": source,
        "type": event.type,
        "time": now_iso(),
        "datacontenttype": CONTENT_TYPE_JSON,
    }
    if extensions:
        out.update(extensions)
    # The data straight from pydantic's serializer into the envelope's bytes: no Python dict
    # (a Fragment is written as it is). The attributes are strings: orjson takes them all.
    out["data"] = orjson.Fragment(event.__pydantic_serializer__.to_json(event, exclude=_TYPE_ONLY))
    payload = orjson.dumps(out)
    if len(payload) > max_bytes:
        _check_size(payload, event.type, max_bytes)
    return event_id, payload


def encode_binary(envelope: Envelope) -> tuple[bytes, dict[str, str]]:
    """Binary mode (for peers that want it, and for tests): ``ce-*`` headers, data as payload."""
    headers = {
        f"{_CE_PREFIX}{k}": str(v) for k, v in envelope.to_dict().items() if k != "data" and v is not None
    }
    ctype = envelope.datacontenttype or CONTENT_TYPE_JSON
    if isinstance(envelope.data, bytes):
        body = envelope.data
    elif isinstance(envelope.data, str) and not ctype.endswith("json"):
        body = envelope.data.encode()
    else:
        body = _dumps(envelope.data)
    _check_size(body, envelope.type, MAX_PAYLOAD_BYTES)
    return body, headers


def decode(
    payload: bytes,
    headers: Mapping[str, str] | None = None,
    *,
    max_bytes: int = MAX_PAYLOAD_BYTES,
    nats_subject: str | None = None,
) -> Envelope:
    """Decode a NATS message into an :class:`Envelope`, in either mode.

    Raises :class:`PayloadTooLarge` over ``max_bytes``, :class:`MissingDataEnvelope`
    for a payload not inside ``data`` and :class:`InvalidEnvelope` for anything
    else that is not a CloudEvent 1.0.
    """
    if len(payload) > max_bytes:
        raise PayloadTooLarge(
            f"message of {len(payload)} bytes is over the limit of {max_bytes} bytes",
            details={"size": len(payload), "limit": max_bytes},
        )
    if headers and any(k.lower() == "ce-specversion" for k in headers):
        return _decode_binary(payload, headers, nats_subject)
    return _decode_structured(payload, nats_subject)


def decode_reply(payload: bytes, *, max_bytes: int = MAX_PAYLOAD_BYTES) -> dict[str, Any]:
    """A structured-mode reply as its raw JSON object, checked for the required attributes
    and ``data`` (the caller validates ``data`` as the reply model it expects).

    The request path's counterpart of :func:`decode`, without building an
    :class:`Envelope`: services always reply in structured mode.
    """
    if len(payload) > max_bytes:
        raise PayloadTooLarge(
            f"reply of {len(payload)} bytes is over the limit of {max_bytes} bytes",
            details={"size": len(payload), "limit": max_bytes},
        )
    try:
        raw = orjson.loads(payload)
    except orjson.JSONDecodeError as exc:
        raise InvalidEnvelope(f"reply is not a JSON CloudEvent: {exc}") from None
    if not isinstance(raw, dict):
        raise InvalidEnvelope(f"reply is not a JSON CloudEvent: top level is {type(raw).__name__}")
    _check_required(raw)
    if "data" not in raw:
        raise MissingDataEnvelope(f"reply {raw['type']!r} has no 'data'", details={"type": raw["type"]})
    return raw


def _decode_structured(payload: bytes, nats_subject: str | None = None) -> Envelope:
    try:
        raw = orjson.loads(payload)
    except orjson.JSONDecodeError as exc:
        raise InvalidEnvelope(f"message is not a JSON CloudEvent: {exc}") from None
    if not isinstance(raw, dict):
        raise InvalidEnvelope(
            f"message is not a JSON CloudEvent: top level is {type(raw).__name__}, not object"
        )
    _check_required(raw)
    if "data" not in raw:
        if "data_base64" in raw:
            raise InvalidEnvelope("data_base64 is not accepted: JidoCode events carry JSON data")
        extra = sorted(k for k in raw if k not in _CONTEXT_ATTRS and k not in EXTENSIONS.values())
        raise MissingDataEnvelope(
            f"event {raw.get('type')!r} has no 'data': the payload must be inside 'data'",
            details={"id": raw.get("id"), "type": raw.get("type"), "top_level_fields": extra},
        )
    ext: dict[str, str] = {}
    for key, value in raw.items():
        if key in _CONTEXT_ATTRS or key == "data":
            continue
        if key not in _KNOWN_EXT and not _EXT_NAME.fullmatch(key):
            raise InvalidEnvelope(
                f"invalid attribute name {key!r}: CloudEvents attributes are lowercase a-z0-9, at most 20 characters",
                details={"attribute": key},
            )
        if not isinstance(value, str):
            raise InvalidEnvelope(f"extension {key!r} must be a string", details={"attribute": key})
        ext[key] = value
    # Positional: keyword arguments cost a frozen dataclass most of its construction time,
    # and this runs for every request a service receives (the order is the fields').
    return Envelope(
        raw["id"],
        raw["source"],
        raw["type"],
        raw["data"],
        raw["specversion"],
        _opt_str(raw, "time"),
        _opt_str(raw, "subject"),
        _opt_str(raw, "datacontenttype"),
        _opt_str(raw, "dataschema"),
        ext,
        nats_subject,
    )


def _decode_binary(payload: bytes, headers: Mapping[str, str], nats_subject: str | None = None) -> Envelope:
    attrs: dict[str, Any] = {}
    content_type: str | None = None
    for key, value in headers.items():
        lower = key.lower()
        if lower.startswith(_CE_PREFIX):
            attrs[lower[len(_CE_PREFIX) :]] = value
        elif lower == "content-type":
            content_type = value
    _check_required(attrs, binary=True)
    ctype = attrs.get("datacontenttype") or content_type or CONTENT_TYPE_JSON
    attrs["datacontenttype"] = ctype
    try:
        # The SDK validates names and values of the attributes (it would invent
        # an id or a time if they were missing: they were checked above).
        sdk_attrs = dict(attrs)
        if "time" in sdk_attrs:
            sdk_attrs["time"] = datetime.fromisoformat(sdk_attrs["time"].replace("Z", "+00:00"))
        SdkCloudEvent(sdk_attrs)
    except (BaseCloudEventException, ValueError) as exc:
        raise InvalidEnvelope(f"invalid binary-mode CloudEvent: {exc}") from None
    if ctype.split(";")[0].strip().endswith("json"):
        try:
            data: Any = orjson.loads(payload) if payload else None
        except orjson.JSONDecodeError as exc:
            raise InvalidEnvelope(f"data is declared {ctype} but is not JSON: {exc}") from None
    elif ctype.startswith("text/"):
        data = payload.decode("utf-8", errors="replace")
    else:
        data = payload
    ext = {k: str(v) for k, v in attrs.items() if k not in _CONTEXT_ATTRS}
    return Envelope(
        id=attrs["id"],
        source=attrs["source"],
        type=attrs["type"],
        specversion=attrs["specversion"],
        data=data,
        time=attrs.get("time"),
        subject=attrs.get("subject"),
        datacontenttype=ctype,
        dataschema=attrs.get("dataschema"),
        extensions=ext,
        nats_subject=nats_subject,
    )


def _check_required(raw: Mapping[str, Any], *, binary: bool = False) -> None:
    """The required attributes are there and the version is ours; in binary mode the message
    names the headers (``ce-type``) a sender has to add, not the attribute names."""
    for name in _REQUIRED:  # the usual case first, without building a list (every message)
        value = raw.get(name)
        if not (value and isinstance(value, str)):
            break
    else:
        if raw["specversion"] == SPECVERSION:
            return
    missing = [name for name in _REQUIRED if not (isinstance(value := raw.get(name), str) and value)]
    if missing:
        if binary:
            headers = [f"{_CE_PREFIX}{name}" for name in missing]
            raise InvalidEnvelope(
                f"not a binary-mode CloudEvent: missing or empty header(s) {', '.join(headers)}",
                details={"missing": missing, "headers": headers},
            )
        raise InvalidEnvelope(
            f"not a CloudEvent: missing or empty required attribute(s) {', '.join(missing)}",
            details={"missing": missing},
        )
    if raw["specversion"] != SPECVERSION:
        raise InvalidEnvelope(
            f"unsupported specversion {raw['specversion']!r}: expected {SPECVERSION!r}",
            details={"specversion": raw["specversion"]},
        )


def _opt_str(raw: Mapping[str, Any], key: str) -> str | None:
    value = raw.get(key)
    if value is None:
        return None
    if not isinstance(value, str):
        raise InvalidEnvelope(f"attribute {key!r} must be a string", details={"attribute": key})
    return value
