"""The AsyncAPI document: fresh, valid AsyncAPI 3.0, and true to the catalogue, the endpoints and the subjects."""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from typer.testing import CliRunner

from jidocode.cli.main import app
from jidocode.shared import subjects
from jidocode.shared.contract import build_asyncapi, message_key, to_yaml
from jidocode.shared.endpoints import ENDPOINTS, Endpoint
from jidocode.shared.envelope import Envelope, error_envelope
from jidocode.shared.errors import NotFound
from jidocode.shared.events import ALL_EVENTS, ERROR_TYPE, EventModel
from jidocode.shared.events.conversation import ApprovalResponse, SendEvent, UserMessage
from jidocode.shared.events.engine import ProjectInfo, ProjectList, StartProject
from jidocode.shared.events.tools import RunTool, ToolCallMeta

ROOT = Path(__file__).resolve().parents[2]
COMMITTED = ROOT / "docs" / "asyncapi.yaml"
SCHEMA = Path(__file__).parent / "schemas" / "asyncapi-3.0.0.json"
REGENERATE = "regenerate it: jidocode contract asyncapi > docs/asyncapi.yaml"


@pytest.fixture(scope="module")
def doc() -> dict[str, Any]:
    document: dict[str, Any] = build_asyncapi()
    return document


def _type(model: type[EventModel]) -> str:
    return str(model.model_fields["type"].default)


def _refs(node: Any) -> Iterator[str]:
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "$ref" and isinstance(value, str):
                yield value
            else:
                yield from _refs(value)
    elif isinstance(node, list):
        for value in node:
            yield from _refs(value)


def _resolve(doc: dict[str, Any], ref: str) -> Any:
    assert ref.startswith("#/"), ref
    node: Any = doc
    for part in ref[2:].split("/"):
        node = node[part.replace("~1", "/").replace("~0", "~")]
    return node


# -- fresh and valid -------------------------------------------------------------------------


def test_committed_document_is_fresh(doc: dict[str, Any]) -> None:
    assert COMMITTED.read_text() == to_yaml(doc), f"docs/asyncapi.yaml is stale: {REGENERATE}"


def test_cli_prints_the_document(doc: dict[str, Any]) -> None:
    result = CliRunner().invoke(app, ["contract", "asyncapi"])
    assert result.exit_code == 0, result.output
    assert result.output == to_yaml(doc)
    as_json = CliRunner().invoke(app, ["contract", "asyncapi", "--json"])
    assert json.loads(as_json.output) == json.loads(json.dumps(doc))


def test_yaml_reads_back_as_the_document(doc: dict[str, Any]) -> None:
    text = to_yaml(doc)
    assert yaml.safe_load(text) == doc
    assert "&id" not in text and "*id" not in text  # no anchors: plain YAML for every tool


def test_document_is_valid_asyncapi_3() -> None:
    schema = json.loads(SCHEMA.read_text())
    validator = jsonschema.Draft7Validator(schema)
    committed = yaml.safe_load(COMMITTED.read_text())
    errors = [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(committed)]
    assert errors == []
    # the schema has teeth: a wrong action and a reply that is not a reference are caught
    broken = copy.deepcopy(committed)
    broken["operations"]["engine.start_project"]["action"] = "publish"
    broken["operations"]["engine.list_projects"]["reply"]["messages"] = [{"name": "inline"}]
    assert len(list(validator.iter_errors(broken))) >= 2


def test_every_reference_resolves(doc: dict[str, Any]) -> None:
    refs = set(_refs(doc))
    assert len(refs) > 100
    for ref in refs:
        _resolve(doc, ref)


# -- true to the catalogue, the endpoints and the subjects ------------------------------------


def test_every_catalogue_type_and_the_error_event_is_a_message(doc: dict[str, Any]) -> None:
    messages = doc["components"]["messages"]
    names = {m["name"] for m in messages.values()}
    assert {_type(m) for m in ALL_EVENTS} | {ERROR_TYPE} <= names
    for model in ALL_EVENTS:
        msg = messages[message_key(_type(model))]
        assert msg["title"] == model.__name__
        assert msg["payload"]["allOf"][1]["properties"]["type"] == {"const": _type(model)}
        data = msg["payload"]["allOf"][1]["properties"]["data"]
        assert set(data["properties"]) == set(model.model_fields) - {"type"}


def test_error_data_is_error_info(doc: dict[str, Any]) -> None:
    data = doc["components"]["messages"]["error"]["payload"]["allOf"][1]["properties"]["data"]
    assert set(data["properties"]) == {"type", "message", "retryable", "details"}
    assert set(data["required"]) == {"type", "message"}


@pytest.mark.parametrize("ep", ENDPOINTS, ids=lambda e: f"{e.service}.{e.verb}")
def test_every_endpoint_is_a_request_reply_operation(doc: dict[str, Any], ep: Endpoint) -> None:
    operation = doc["operations"][f"{ep.service}.{ep.verb}"]
    assert operation["action"] == "receive"
    assert operation["x-jidocode-service"] == ep.service
    assert operation["bindings"]["nats"]["queue"] == subjects.SERVICE_NAMES[ep.service]
    channel = _resolve(doc, operation["channel"]["$ref"])
    address = channel["address"]
    if ep.scoped:
        assert address.replace("{project_id}", "p1") == ep.subject("p1")
        assert address.replace("{project_id}", "*") == ep.pattern()
    else:
        assert address == ep.subject()
    (request,) = (_resolve(doc, r["$ref"]) for r in operation["messages"])
    assert _resolve(doc, request["$ref"])["name"] == ep.request_type
    replies = [
        _resolve(doc, _resolve(doc, r["$ref"])["$ref"])["name"] for r in operation["reply"]["messages"]
    ]
    assert replies == [ep.reply_type, ERROR_TYPE]
    assert _resolve(doc, operation["reply"]["channel"]["$ref"])["address"] is None


def test_operation_messages_belong_to_their_channels(doc: dict[str, Any]) -> None:
    for op_id, operation in doc["operations"].items():
        channel_ref = operation["channel"]["$ref"]
        for ref in operation.get("messages", []):
            assert ref["$ref"].startswith(channel_ref + "/messages/"), op_id
        reply = operation.get("reply")
        if reply:
            for ref in reply["messages"]:
                assert ref["$ref"].startswith(reply["channel"]["$ref"] + "/messages/"), op_id


def test_address_parameters_are_declared(doc: dict[str, Any]) -> None:
    for channel_id, channel in doc["channels"].items():
        in_address = set(re.findall(r"\{(\w+)\}", channel["address"] or ""))
        assert in_address == set(channel.get("parameters", {})), channel_id
        for ref in channel.get("parameters", {}).values():
            assert _resolve(doc, ref["$ref"])["description"]


def test_published_events_have_the_subjects_their_type_gives(doc: dict[str, Any]) -> None:
    channels = doc["channels"]
    for model in ALL_EVENTS:
        t = _type(model)
        if model.channel == "conversation":
            address = channels[f"evt.{message_key(t)}"]["address"]
            concrete = address.replace("{project_id}", "p1").replace("{conversation_id}", "c1")
            assert concrete == subjects.conversation_out("p1", "c1", t)
            assert doc["operations"][f"output.{message_key(t)}"]["action"] == "send"
        elif model.channel == "signal":
            assert channels[f"sig.{message_key(t)}"]["address"] == subjects.signal(t)
            assert doc["operations"][f"signal.{message_key(t)}"]["x-jidocode-senders"]
    conv_in = channels["conv.in"]["address"]
    assert conv_in.replace("{project_id}", "p1").replace("{conversation_id}", "c1") == (
        subjects.conversation_in("p1", "c1")
    )


# -- a real envelope validates against its message ----------------------------------------------


def _payload_validator(doc: dict[str, Any], key: str) -> jsonschema.Draft7Validator:
    # Draft 7 ignores the siblings of "$ref": the document rides along so "#/components/…" resolves.
    return jsonschema.Draft7Validator({**doc, "$ref": f"#/components/messages/{key}/payload"})


INFO = ProjectInfo(project_id="p1", root_path="/src/app", started_at="2026-01-01T00:00:00Z")
SAMPLES: list[EventModel] = [
    StartProject(root_path="/src/app"),
    INFO,
    ProjectList(projects=[INFO]),
    SendEvent(conversation_id="c1", event_type="conversation.user.message", data={"text": "hi"}),
    UserMessage(text="hi"),
    ApprovalResponse(request_id="r1", decision="approve_once"),
    RunTool(name="read_file", args={"path": "README.md"}, meta=ToolCallMeta(request_id="r1")),
]


@pytest.mark.parametrize("event", SAMPLES, ids=lambda e: e.type)
def test_real_envelopes_validate_against_their_message(doc: dict[str, Any], event: EventModel) -> None:
    env = Envelope.new(event, source="test/1", project_id="p1", correlation_id="k1")
    validator = _payload_validator(doc, message_key(event.type))
    assert list(validator.iter_errors(env.to_dict())) == []
    wrong_type = {**env.to_dict(), "type": "something.else"}
    assert list(validator.iter_errors(wrong_type))
    no_data = {k: v for k, v in env.to_dict().items() if k != "data"}
    assert list(validator.iter_errors(no_data))


def test_an_error_reply_validates_against_the_error_message(doc: dict[str, Any]) -> None:
    env = error_envelope(
        "test/1", NotFound("no such project", details={"project_id": "p9"}), causation_id="x"
    )
    validator = _payload_validator(doc, "error")
    assert list(validator.iter_errors(env.to_dict())) == []
    assert list(validator.iter_errors({**env.to_dict(), "data": {"message": "no type"}}))
