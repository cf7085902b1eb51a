"""The gateway in compose.yaml and k8s/ (issue 16 item 5): its own NATS user with the client's
rights but conversation input, its token from the deployment's secrets, health over HTTP."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from jidocode.cli.deploy import GATEWAY_TOKEN_VAR, env_file, generate_passwords, k8s_secret
from jidocode.shared import nats_permissions as perms
from jidocode.shared import subjects

from .natsutil import may_publish, may_subscribe

ROOT = Path(__file__).resolve().parents[2]
ids = st.from_regex(r"[A-Za-z0-9_\-]{1,40}", fullmatch=True)


@given(project=ids, conversation=ids, verb=ids)
def test_the_gateway_user_acts_as_a_client_but_never_writes_conversation_input(
    project: str, conversation: str, verb: str
) -> None:
    for subject in (
        subjects.engine(verb),
        subjects.project(project, verb),
        subjects.conversations(project, verb),
        subjects.tools(project, verb),
        subjects.assets(project, verb),
    ):
        assert may_publish(perms.GATEWAY, subject) is may_publish(perms.CLIENT, subject) is True
    assert not may_publish(perms.GATEWAY, subjects.conversation_in(project, conversation))
    assert may_subscribe(
        perms.GATEWAY, subjects.conversation_out(project, conversation, "conversation.started")
    )
    assert not may_publish(perms.GATEWAY, subjects.conversation_out(project, conversation, "x.y"))
    assert not may_publish(perms.GATEWAY, f"$KV.{subjects.BUCKET_PROJECTS}.{project}")
    assert not may_publish(perms.GATEWAY, f"$JS.API.STREAM.DELETE.{subjects.STREAM_EVENTS}")
    # it reads the conversations' output stream (SSE) through its own consumers
    assert may_publish(perms.GATEWAY, f"$JS.API.CONSUMER.CREATE.{subjects.STREAM_EVENTS}.c1.{project}")
    assert may_publish(perms.GATEWAY, f"$JS.API.CONSUMER.MSG.NEXT.{subjects.STREAM_EVENTS}.c1")
    assert perms.user_for(perms.GATEWAY).permissions.allow_responses is False


def test_compose_runs_the_gateway_as_its_own_user_on_loopback() -> None:
    compose = yaml.safe_load((ROOT / "compose.yaml").read_text())
    svc = compose["services"]["gateway"]
    env = svc["environment"]
    assert svc["command"] == ["serve", "gateway"]
    assert env["NATS_USER"] == perms.GATEWAY
    assert env[perms.INBOX_ENV_VAR] == perms.inbox_prefix(perms.GATEWAY)
    assert env["NATS_PASSWORD"].startswith("${" + perms.password_env_var(perms.GATEWAY) + ":?")
    assert env[GATEWAY_TOKEN_VAR].startswith("${" + GATEWAY_TOKEN_VAR + ":?")
    assert env["JIDO_GATEWAY_HOST"] == "0.0.0.0" and env["JIDO_GATEWAY_PORT"] == "8765"
    assert all(port.startswith("127.0.0.1:") for port in svc["ports"])
    assert "/healthz" in " ".join(svc["healthcheck"]["test"])
    others = {perms.password_env_var(u) for u in perms.USERS} - {perms.password_env_var(perms.GATEWAY)}
    assert not any(var in str(env.values()) for var in others)
    assert "OPENAI_API_KEY" not in env
    for node in ("nats-1", "nats-2", "nats-3"):
        assert perms.password_env_var(perms.GATEWAY) in compose["services"][node]["environment"]


def test_deploy_env_and_the_k8s_secret_carry_a_fresh_gateway_token() -> None:
    passwords = generate_passwords()
    first, second = env_file(passwords), env_file(passwords)
    token_line = next(line for line in first.splitlines() if line.startswith(f"{GATEWAY_TOKEN_VAR}="))
    assert len(token_line.split("=", 1)[1]) >= 40 and token_line not in second
    secret = yaml.safe_load(k8s_secret(passwords))
    assert len(secret["stringData"][GATEWAY_TOKEN_VAR]) >= 40
    assert secret["stringData"][perms.password_env_var(perms.GATEWAY)] == passwords[perms.GATEWAY]


def _docs(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def test_k8s_gateway_deployment_service_and_ingress_example() -> None:
    kv = pytest.importorskip("kubernetes_validate.utils", reason="kubernetes-validate is not installed")
    version = kv.latest_version()
    docs = {d["kind"]: d for d in _docs(ROOT / "k8s" / "base" / "gateway.yaml")}
    [ingress] = _docs(ROOT / "k8s" / "examples" / "gateway-ingress.yaml")
    for doc in (*docs.values(), ingress):
        kv.validate(doc, version, strict=True)
    deployment, service = docs["Deployment"], docs["Service"]
    assert deployment["spec"]["replicas"] >= 2  # stateless: replicas behind the Service
    [container] = deployment["spec"]["template"]["spec"]["containers"]
    assert container["args"] == ["serve", "gateway"]
    env = {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]}
    assert env["NATS_USER"] == perms.GATEWAY and env[perms.INBOX_ENV_VAR] == perms.inbox_prefix(perms.GATEWAY)
    secret_keys = {
        v["secretKeyRef"]["key"] for v in env.values() if isinstance(v, dict) and "secretKeyRef" in v
    }
    assert secret_keys == {perms.password_env_var(perms.GATEWAY), GATEWAY_TOKEN_VAR}
    [example] = _docs(ROOT / "k8s" / "base" / "secret.example.yaml")
    assert secret_keys <= set(example["stringData"])
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert container[probe]["httpGet"] == {"path": "/healthz", "port": "http"}
    assert service["spec"]["selector"] == deployment["spec"]["selector"]["matchLabels"]
    backend = ingress["spec"]["rules"][0]["http"]["paths"][0]["backend"]["service"]
    assert backend == {"name": service["metadata"]["name"], "port": {"name": "http"}}
    assert ingress["metadata"]["annotations"]["nginx.ingress.kubernetes.io/proxy-buffering"] == "off"
    nats_env = {
        e["name"]
        for s in _docs(ROOT / "k8s" / "base" / "nats.yaml")
        if s["kind"] == "StatefulSet"
        for e in s["spec"]["template"]["spec"]["containers"][0]["env"]
    }
    assert perms.password_env_var(perms.GATEWAY) in nats_env
