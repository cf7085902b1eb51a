"""The CloudEvents NATS codec: round trips in both modes and every rejection."""

from __future__ import annotations

import contextlib
import json
import re
from dataclasses import replace
from pathlib import Path

import orjson
import pytest
from cloudevents.core.formats.json import JSONFormat
from hypothesis import given
from hypothesis import strategies as st

from jidocode.shared.envelope import (
    MAX_PAYLOAD_BYTES,
    Envelope,
    decode,
    decode_reply,
    encode,
    encode_binary,
    encode_event,
    error_envelope,
)
from jidocode.shared.errors import (
    InvalidEnvelope,
    InvalidInput,
    MissingDataEnvelope,
    NotFound,
    PayloadTooLarge,
)
from jidocode.shared.events.engine import ProjectStarted
from jidocode.shared.events.tools import RunTool, ToolCallMeta
from jidocode.shared.natsserver import NatsServer


def _env(**ext: str) -> Envelope:
    return Envelope.new(ProjectStarted(project_id="P1", root_path="/srv/p"), source="engine/test", **ext)


def test_structured_round_trip_keeps_every_attribute() -> None:
    env = _env(
        project_id="P1",
        conversation_id="C1",
        correlation_id="K",
        causation_id="X",
        traceparent="00-ab",
        dataref="obj://x",
    )
    payload, headers = encode(env)
    assert headers is None  # structured mode needs no header
    back = decode(payload)
    assert back == env
    assert (back.project_id, back.conversation_id, back.correlation_id, back.causation_id) == (
        "P1",
        "C1",
        "K",
        "X",
    )
    assert back.traceparent == "00-ab" and back.dataref == "obj://x"
    assert back.event() == ProjectStarted(project_id="P1", root_path="/srv/p")


def test_jetstream_publish_carries_the_event_id_as_msg_id() -> None:
    env = _env()
    _, headers = encode(env, jetstream=True)
    assert headers == {"Nats-Msg-Id": env.id}


def test_binary_round_trip() -> None:
    env = _env(project_id="P1", correlation_id="K")
    body, headers = encode_binary(env)
    assert headers["ce-id"] == env.id and headers["ce-datacontenttype"] == "application/json"
    assert json.loads(body) == env.data
    assert decode(body, headers) == env


def test_binary_mode_with_content_type_header_and_text_data() -> None:
    headers = {
        "ce-specversion": "1.0",
        "ce-id": "1",
        "ce-source": "s",
        "ce-type": "t",
        "content-type": "text/plain",
    }
    env = decode(b"hello", headers)
    assert env.data == "hello" and env.datacontenttype == "text/plain"


def test_our_structured_output_is_a_cloudevent_for_the_sdk() -> None:
    env = _env(project_id="P1")
    sdk_event = JSONFormat().read(None, encode(env)[0])
    assert sdk_event.get_id() == env.id
    assert sdk_event.get_extension("projectid") == "P1"
    assert sdk_event.get_data() == env.data


def test_sdk_structured_output_decodes() -> None:
    from cloudevents.core.v1.event import CloudEvent

    sdk = CloudEvent(
        {"type": "project.started", "source": "/x", "id": "abc", "projectid": "P"},
        {"project_id": "P", "root_path": "/"},
    )
    env = decode(JSONFormat().write(sdk))
    assert env.id == "abc" and env.project_id == "P" and env.event().type == "project.started"


@pytest.mark.parametrize("missing", ["id", "source", "type", "specversion"])
def test_structured_missing_required_attribute_is_rejected(missing: str) -> None:
    raw = {"specversion": "1.0", "id": "1", "source": "s", "type": "t", "data": {}}
    del raw[missing]
    with pytest.raises(InvalidEnvelope, match=missing):
        decode(json.dumps(raw).encode())


@pytest.mark.parametrize("missing", ["id", "source", "type", "specversion"])
def test_binary_missing_required_attribute_is_rejected(missing: str) -> None:
    headers = {"ce-specversion": "1.0", "ce-id": "1", "ce-source": "s", "ce-type": "t"}
    if missing == "specversion":
        # without ce-specversion the message is not binary mode: it is read as structured
        del headers["ce-specversion"]
        with pytest.raises(InvalidEnvelope):
            decode(b"{}", headers)
        return
    del headers[f"ce-{missing}"]
    with pytest.raises(InvalidEnvelope, match=f"missing or empty header\\(s\\) ce-{missing}$") as info:
        decode(b"{}", headers)
    assert info.value.details["headers"] == [f"ce-{missing}"]  # the header a sender has to add


def test_empty_id_is_rejected_not_invented() -> None:
    with pytest.raises(InvalidEnvelope, match="id"):
        decode(b'{"specversion":"1.0","id":"","source":"s","type":"t","data":{}}')


def test_flat_payload_is_missing_data_envelope() -> None:
    raw = {"specversion": "1.0", "id": "1", "source": "s", "type": "conversation.user.message", "text": "hi"}
    with pytest.raises(MissingDataEnvelope) as info:
        decode(json.dumps(raw).encode())
    assert info.value.type == "missing_data_envelope"
    assert info.value.details["top_level_fields"] == ["text"]


@pytest.mark.parametrize(
    ("payload", "fragment"),
    [
        (b"not json", "not a JSON CloudEvent"),
        (b"[1,2]", "top level is list"),
        (b"\xff\xfe", "not a JSON CloudEvent"),
        (b'{"specversion":"0.3","id":"1","source":"s","type":"t","data":{}}', "specversion"),
        (
            b'{"specversion":"1.0","id":"1","source":"s","type":"t","data":{},"Bad-Name":"x"}',
            "invalid attribute name",
        ),
        (
            b'{"specversion":"1.0","id":"1","source":"s","type":"t","data":{},"projectid":7}',
            "must be a string",
        ),
        (b'{"specversion":"1.0","id":"1","source":"s","type":"t","data_base64":"AA=="}', "data_base64"),
        (b'{"specversion":"1.0","id":1,"source":"s","type":"t","data":{}}', "id"),
    ],
)
def test_invalid_structured_messages(payload: bytes, fragment: str) -> None:
    with pytest.raises(InvalidEnvelope, match=fragment):
        decode(payload)


def test_binary_invalid_json_data_and_bad_extension_name() -> None:
    headers = {"ce-specversion": "1.0", "ce-id": "1", "ce-source": "s", "ce-type": "t"}
    with pytest.raises(InvalidEnvelope, match="not JSON"):
        decode(b"{oops", headers)
    with pytest.raises(InvalidEnvelope, match="binary-mode"):
        decode(b"{}", {**headers, "ce-this_is_not_valid": "x"})


def test_payload_over_the_limit_is_rejected_before_parsing() -> None:
    with pytest.raises(PayloadTooLarge, match="over the limit"):
        decode(b"x" * 101, max_bytes=100)


def test_unknown_type_and_bad_data_are_invalid_input() -> None:
    env = Envelope(id="1", source="s", type="no.such.type", data={})
    with pytest.raises(InvalidInput, match="unknown event type"):
        env.event()
    env = Envelope(id="1", source="s", type="project.started", data={"project_id": 3})
    with pytest.raises(InvalidInput, match="root_path"):
        env.event()


def test_error_envelope_carries_error_info() -> None:
    env = error_envelope(
        "engine/x", NotFound("unknown project id 'P'", details={"project_id": "P"}), causation_id="C"
    )
    assert env.type == "error" and env.causation_id == "C"
    assert env.data == {
        "type": "not_found",
        "message": "unknown project id 'P'",
        "retryable": False,
        "details": {"project_id": "P"},
    }


@given(
    text=st.text(max_size=200),
    ext=st.dictionaries(
        st.sampled_from(["projectid", "conversationid", "correlationid"]), st.text(min_size=1, max_size=30)
    ),
)
def test_structured_round_trip_property(text: str, ext: dict[str, str]) -> None:
    env = Envelope(
        id="01X",
        source="src",
        type="conversation.user.message",
        data={"text": text},
        time="2026-01-01T00:00:00Z",
        extensions=ext,
    )
    assert decode(encode(env)[0]) == env
    body, headers = encode_binary(env)
    assert decode(body, headers) == env


@given(st.binary(max_size=300))
def test_decode_never_crashes_on_garbage(payload: bytes) -> None:
    with contextlib.suppress(InvalidEnvelope):
        decode(payload)


# -- the bus payload limit ----------------------------------------------------------------

ROOT = Path(__file__).resolve().parents[3]


def _sized(size: int) -> Envelope:
    """An envelope whose structured encoding is exactly ``size`` bytes."""
    base = Envelope(id="01J", source="s", type="tool.run", data={"pad": ""}, time="2026-01-01T00:00:00Z")
    empty = len(orjson.dumps(base.to_dict()))
    return replace(base, data={"pad": "x" * (size - empty)})


def test_one_limit_bounds_encoding_and_decoding() -> None:
    at = _sized(MAX_PAYLOAD_BYTES)
    payload, _ = encode(at)
    assert len(payload) == MAX_PAYLOAD_BYTES
    assert decode(payload) == at and decode_reply(payload)["id"] == "01J"
    over = _sized(MAX_PAYLOAD_BYTES + 1)
    with pytest.raises(
        PayloadTooLarge, match=f"{MAX_PAYLOAD_BYTES + 1} bytes is over the limit of {MAX_PAYLOAD_BYTES}"
    ) as sent:
        encode(over)
    assert sent.value.details == {
        "size": MAX_PAYLOAD_BYTES + 1,
        "limit": MAX_PAYLOAD_BYTES,
        "type": "tool.run",
    }
    raw = orjson.dumps(over.to_dict())  # what another sender could still publish
    for refuse in (decode, decode_reply):
        with pytest.raises(
            PayloadTooLarge, match=f"{len(raw)} bytes is over the limit of {MAX_PAYLOAD_BYTES}"
        ):
            refuse(raw)
    with pytest.raises(PayloadTooLarge, match=r"'tool\.run' event of"):
        encode_binary(replace(over, data={"pad": "x" * MAX_PAYLOAD_BYTES}))


def test_encode_event_refuses_a_message_over_the_limit_before_it_is_sent() -> None:
    small = RunTool(name="write_file", args={"content": ""}, meta=ToolCallMeta(request_id="r"))
    empty = len(encode_event(small, source="s")[1])
    fits = small.model_copy(update={"args": {"content": "x" * (MAX_PAYLOAD_BYTES - empty)}})
    assert len(encode_event(fits, source="s")[1]) == MAX_PAYLOAD_BYTES
    over = small.model_copy(update={"args": {"content": "x" * (MAX_PAYLOAD_BYTES - empty + 1)}})
    with pytest.raises(PayloadTooLarge) as info:
        encode_event(over, source="s")
    assert info.value.details == {
        "size": MAX_PAYLOAD_BYTES + 1,
        "limit": MAX_PAYLOAD_BYTES,
        "type": "tool.run",
    }


@given(pad=st.integers(min_value=0, max_value=300), limit=st.integers(min_value=150, max_value=400))
def test_a_payload_is_encoded_exactly_when_it_fits(pad: int, limit: int) -> None:
    env = Envelope(id="1", source="s", type="t", data="x" * pad)
    size = len(orjson.dumps(env.to_dict()))
    try:
        payload, _ = encode(env, max_bytes=limit)
    except PayloadTooLarge as exc:
        assert size > limit and exc.details["size"] == size and exc.details["limit"] == limit
    else:
        assert len(payload) == size <= limit


def _size(text: str) -> int:
    """A nats-server size (``8388608``, ``1MB``: NATS's units are powers of 1024)."""
    found = re.fullmatch(r"(\d+)\s*([KMG]B)?", text.strip().strip('"'))
    assert found is not None, text
    return int(found[1]) * {None: 1, "KB": 1024, "MB": 1024**2, "GB": 1024**3}[found[2]]


def test_every_nats_server_we_configure_carries_a_message_at_the_limit_with_its_headers() -> None:
    embedded = NatsServer(store_dir=Path("/nonexistent")).render_config()
    configs = [embedded] + [p.read_text() for p in sorted((ROOT / "deploy" / "nats").glob("nats-*.conf"))]
    configs.append((ROOT / "k8s" / "base" / "nats.yaml").read_text())
    sizes = [_size(m) for text in configs for m in re.findall(r"^\s*max_payload:\s*(\S+)", text, re.M)]
    assert len(sizes) == len(configs) >= 3
    # NATS counts headers in max_payload: a JetStream publish adds Nats-Msg-Id, an error reply two headers
    assert all(size >= MAX_PAYLOAD_BYTES + 16 * 1024 for size in sizes), sizes
