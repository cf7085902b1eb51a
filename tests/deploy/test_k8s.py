"""k8s/base validates against the Kubernetes schemas (offline, from the kubernetes-validate package)
and is wired consistently: probes, users, secrets, config maps, the NATS config."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from jidocode.cli.deploy import LLM_KEY_VARS, generate_passwords, k8s_secret
from jidocode.shared import nats_permissions as perms
from jidocode.shared.natsserver import find_nats_server

# The Kubernetes schemas ship in the kubernetes-validate package (test extra); without it, skip loudly.
_kv = pytest.importorskip(
    "kubernetes_validate.utils", reason="kubernetes-validate is not installed (pip install -e '.[test]')"
)
ValidationError = _kv.ValidationError
latest_version = _kv.latest_version
validate = _kv.validate

ROOT = Path(__file__).resolve().parents[2]
BASE = ROOT / "k8s" / "base"
K8S_VERSION = latest_version()
DEPLOYMENTS = {
    "engine": "engine",
    "project": "project",
    "conversation": "conversation",
    "tool-runner": "tool_runner",
    "asset-loader": "asset_loader",
    "prd": "prd",
}


def _docs(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def _manifests() -> list[tuple[str, dict[str, Any]]]:
    return [
        (p.name, d) for p in sorted(BASE.glob("*.yaml")) if p.name != "kustomization.yaml" for d in _docs(p)
    ]


def _by_kind(kind: str) -> dict[str, dict[str, Any]]:
    return {d["metadata"]["name"]: d for _, d in _manifests() if d["kind"] == kind}


@pytest.mark.parametrize(
    "doc",
    [d for _, d in _manifests()],
    ids=[f"{f}:{d['kind']}/{d['metadata']['name']}" for f, d in _manifests()],
)
def test_manifest_validates_against_the_kubernetes_schema(doc: dict[str, Any]) -> None:
    try:
        validate(doc, K8S_VERSION, strict=True)
    except ValidationError as exc:
        pytest.fail(f"{'.'.join(map(str, exc.path))}: {exc.message}")


def test_the_validator_rejects_a_broken_manifest() -> None:
    broken = json.loads(json.dumps(_by_kind("Deployment")["engine"]))
    broken["spec"]["replicas"] = "one"
    broken["spec"]["template"]["spec"]["containers"][0]["livenessProbe"]["exec"]["cmd"] = ["x"]
    with pytest.raises(ValidationError):
        validate(broken, K8S_VERSION, strict=True)


def test_kustomization_lists_every_manifest_but_the_secret_example() -> None:
    [kust] = _docs(BASE / "kustomization.yaml")
    on_disk = {p.name for p in BASE.glob("*.yaml")} - {"kustomization.yaml", "secret.example.yaml"}
    assert set(kust["resources"]) == on_disk
    assert kust["namespace"] == "jidocode"


def _container(deployment: dict[str, Any]) -> dict[str, Any]:
    [container] = deployment["spec"]["template"]["spec"]["containers"]
    assert isinstance(container, dict)
    return container


def _env(container: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]}


@pytest.mark.parametrize(("name", "service"), sorted(DEPLOYMENTS.items()))
def test_each_service_deployment(name: str, service: str) -> None:
    deployment = _by_kind("Deployment")[name]
    c = _container(deployment)
    env = _env(c)
    assert c["args"] == ["serve", service]
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert c[probe]["exec"]["command"][:3] == ["jidocode", "probe", service]
    assert set(c["resources"]) == {"requests", "limits"}
    assert env["NATS_USER"] == service
    assert env[perms.INBOX_ENV_VAR] == perms.inbox_prefix(service)
    assert env["NATS_PASSWORD"]["secretKeyRef"]["key"] == perms.password_env_var(service)
    pod = deployment["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["automountServiceAccountToken"] is False
    # Only the conversation service sees LLM keys, and no service sees another's password.
    secret_keys = {
        v["secretKeyRef"]["key"] for v in env.values() if isinstance(v, dict) and "secretKeyRef" in v
    }
    assert secret_keys - set(LLM_KEY_VARS) == {perms.password_env_var(service)}
    assert (len(secret_keys) > 1) is (service == "conversation")


def test_replicas_pdbs_and_the_tool_runner_autoscaler() -> None:
    deployments = _by_kind("Deployment")
    assert deployments["conversation"]["spec"]["replicas"] == 2
    assert deployments["tool-runner"]["spec"]["replicas"] == 2
    pdbs = _by_kind("PodDisruptionBudget")
    assert set(pdbs) == {"conversation", "tool-runner", "nats"}
    for name, pdb in pdbs.items():
        labels = (_by_kind("StatefulSet") | deployments)[name]["spec"]["template"]["metadata"]["labels"]
        assert pdb["spec"]["selector"]["matchLabels"].items() <= labels.items()
    [hpa] = _by_kind("HorizontalPodAutoscaler").values()
    assert hpa["spec"]["scaleTargetRef"] == {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "name": "tool-runner",
    }
    assert hpa["spec"]["minReplicas"] >= 2


def test_referenced_config_maps_secrets_and_claims_exist() -> None:
    config_maps = _by_kind("ConfigMap")
    [secret] = _docs(BASE / "secret.example.yaml")
    claims = _by_kind("PersistentVolumeClaim")
    for _, doc in _manifests():
        if doc["kind"] not in ("Deployment", "StatefulSet"):
            continue
        pod = doc["spec"]["template"]["spec"]
        for volume in pod.get("volumes", []):
            if "configMap" in volume:
                assert volume["configMap"]["name"] in config_maps
            if "persistentVolumeClaim" in volume:
                assert volume["persistentVolumeClaim"]["claimName"] in claims
        for container in pod["containers"]:
            for ref in container.get("envFrom", []):
                assert ref["configMapRef"]["name"] in config_maps
            for e in container["env"]:
                key_ref = e.get("valueFrom", {}).get("secretKeyRef")
                if key_ref:
                    assert key_ref["name"] == secret["metadata"]["name"]
                    assert key_ref["key"] in secret["stringData"]


def test_settings_config_map_is_the_documented_example() -> None:
    settings = _by_kind("ConfigMap")["jidocode-settings"]["data"]["settings.json"]
    assert settings == (ROOT / "deploy" / "settings.example.json").read_text()
    assert _by_kind("ConfigMap")["jidocode-env"]["data"]["JIDO_JS_REPLICAS"] == "3"


def test_nats_statefulset_is_a_three_node_jetstream_cluster(tmp_path: Path) -> None:
    sts = _by_kind("StatefulSet")["nats"]
    assert sts["spec"]["replicas"] == 3
    assert sts["spec"]["serviceName"] == "nats-headless"
    assert _by_kind("Service")["nats-headless"]["spec"]["clusterIP"] == "None"
    data = _by_kind("ConfigMap")["nats-config"]["data"]
    assert data["auth.conf"] == perms.render_accounts()
    assert "jetstream" in data["nats.conf"]
    for i in range(3):
        assert f"nats-{i}.nats-headless:6222" in data["nats.conf"]
    env_names = {e["name"] for e in _container(sts)["env"]}
    assert {perms.password_env_var(u) for u in perms.USERS} <= env_names
    # The config parses and validates in the real nats-server, with the pod's environment.
    for name, text in data.items():
        (tmp_path / name).write_text(text.replace("/data/jetstream", str(tmp_path / "js")))
    env = {perms.password_env_var(u): pw for u, pw in generate_passwords().items()}
    checked = subprocess.run(
        [find_nats_server(), "-t", "-c", str(tmp_path / "nats.conf")],
        capture_output=True,
        text=True,
        env={**os.environ, **env, "POD_NAME": "nats-0"},
        timeout=30,
        check=False,
    )
    assert checked.returncode == 0, checked.stderr


def test_generated_secret_validates_and_has_the_example_keys() -> None:
    doc = yaml.safe_load(
        k8s_secret(generate_passwords(), namespace="jidocode", llm_keys={"OPENAI_API_KEY": "k"})
    )
    validate(doc, K8S_VERSION, strict=True)
    [example] = _docs(BASE / "secret.example.yaml")
    assert set(doc["stringData"]) <= set(example["stringData"])


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl not installed (kustomize rendering)")
def test_kustomize_build_renders_valid_namespaced_manifests() -> None:
    rendered = subprocess.run(
        ["kubectl", "kustomize", str(BASE)], capture_output=True, text=True, timeout=60, check=False
    )
    assert rendered.returncode == 0, rendered.stderr
    docs = [d for d in yaml.safe_load_all(rendered.stdout) if d]
    kinds = sorted(d["kind"] for d in docs)
    assert kinds.count("Deployment") == 7  # six services and the gateway
    assert "Secret" not in kinds  # created by `jidocode deploy k8s-secrets`, never by apply -k
    for doc in docs:
        validate(doc, K8S_VERSION, strict=True)
        if doc["kind"] != "Namespace":
            assert doc["metadata"]["namespace"] == "jidocode"
        assert doc["metadata"]["labels"]["app.kubernetes.io/instance"] == "jidocode"
