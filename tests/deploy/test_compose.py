"""compose.yaml validates against the Compose Specification and wires every service as the docs say.

The schema is the compose-spec JSON schema vendored in ``tests/deploy/schemas/`` (Apache-2.0,
from the compose-spec project via check-jsonschema), so nothing is fetched at test time.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from jidocode.cli.deploy import cluster_nodes
from jidocode.shared import nats_permissions as perms
from jidocode.shared.settings import parse_settings_bytes

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = Path(__file__).with_name("schemas") / "compose-spec.json"
SERVICE_OF = {
    "engine": "engine",
    "project": "project",
    "conversation": "conversation",
    "tool-runner": "tool_runner",
    "asset-loader": "asset_loader",
    "prd": "prd",
}


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    doc = yaml.safe_load((ROOT / "compose.yaml").read_text())  # resolves the << merge keys
    assert isinstance(doc, dict)
    return doc


def test_compose_file_follows_the_compose_specification(compose: dict[str, Any]) -> None:
    schema = json.loads(SCHEMA.read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    errors = sorted(jsonschema.Draft202012Validator(schema).iter_errors(compose), key=str)
    assert not errors, "\n".join(f"{list(e.absolute_path)}: {e.message}" for e in errors)


def test_schema_catches_a_broken_compose_file(compose: dict[str, Any]) -> None:
    schema = json.loads(SCHEMA.read_text())
    broken = json.loads(json.dumps(compose))
    broken["services"]["engine"]["deploy"] = {"replicas": "two"}
    broken["services"]["engine"]["healthcheck"]["interval"] = 15
    assert len(list(jsonschema.Draft202012Validator(schema).iter_errors(broken))) >= 2


def test_three_nats_nodes_run_the_generated_configs(compose: dict[str, Any]) -> None:
    nodes = cluster_nodes(3)
    for node in nodes:
        svc = compose["services"][node.server_name]
        conf = f"{node.server_name}.conf"
        assert svc["command"] == ["-c", f"/etc/nats/{conf}"]
        assert "./deploy/nats:/etc/nats:ro" in svc["volumes"]
        assert (ROOT / "deploy" / "nats" / conf).read_text() == perms.render_node(node)
        assert set(svc["environment"]) == {perms.password_env_var(u) for u in perms.USERS}
        assert "healthz" in " ".join(svc["healthcheck"]["test"])
    assert (ROOT / "deploy" / "nats" / "auth.conf").read_text() == perms.render_accounts()


@pytest.mark.parametrize(("compose_name", "service"), sorted(SERVICE_OF.items()))
def test_each_service_runs_as_its_own_nats_user(
    compose: dict[str, Any], compose_name: str, service: str
) -> None:
    svc = compose["services"][compose_name]
    env = svc["environment"]
    assert svc["command"] == ["serve", service]
    assert svc["healthcheck"]["test"] == ["CMD", "jidocode", "probe", service]
    assert env["NATS_USER"] == service
    assert env[perms.INBOX_ENV_VAR] == perms.inbox_prefix(service)
    assert env["NATS_PASSWORD"].startswith("${" + perms.password_env_var(service) + ":?")
    assert env["JIDO_JS_REPLICAS"] == "3"
    assert set(env["NATS_URL"].split(",")) == {f"nats://nats-{i}:4222" for i in (1, 2, 3)}
    assert "${JIDO_PROJECTS:-projects}:/projects" in svc["volumes"]
    assert any(v.endswith(":/home/jido/.jido_code/settings.json:ro") for v in svc["volumes"])
    assert svc["stop_signal"] == "SIGTERM"
    assert {f"nats-{i}" for i in (1, 2, 3)} <= set(svc["depends_on"])
    # No service sees another's password, and only the conversation service sees LLM keys.
    others = {perms.password_env_var(u) for u in perms.USERS} - {perms.password_env_var(service)}
    assert not any(var in str(env.values()) for var in others)
    assert ("OPENAI_API_KEY" in env) is (service == "conversation")


def test_conversation_and_tool_runner_run_two_replicas(compose: dict[str, Any]) -> None:
    assert compose["services"]["conversation"]["deploy"]["replicas"] == 2
    assert compose["services"]["tool-runner"]["deploy"]["replicas"] == 2


def test_cli_service_is_the_client_user(compose: dict[str, Any]) -> None:
    env = compose["services"]["cli"]["environment"]
    assert env["NATS_USER"] == perms.CLIENT
    assert env[perms.INBOX_ENV_VAR] == perms.inbox_prefix(perms.CLIENT)


def test_only_one_nats_port_is_published_and_only_on_loopback(compose: dict[str, Any]) -> None:
    published = {name: svc.get("ports", []) for name, svc in compose["services"].items() if svc.get("ports")}
    assert list(published) == ["nats-1", "gateway"]  # NATS once, and the HTTP gateway
    assert all(p.startswith("127.0.0.1:") for ports in published.values() for p in ports)


def test_every_interpolated_variable_is_well_formed() -> None:
    text = (ROOT / "compose.yaml").read_text()
    for ref in re.findall(r"\$\{[^}]*\}", text):
        assert re.fullmatch(r"\$\{[A-Z_][A-Z0-9_]*(:?[-?][^}]*)?\}", ref), ref


def test_the_mounted_settings_example_is_valid() -> None:
    raw = (ROOT / "deploy" / "settings.example.json").read_bytes()
    data, diagnostics = parse_settings_bytes(raw, "settings.example.json")
    assert data is not None
    assert diagnostics == []
