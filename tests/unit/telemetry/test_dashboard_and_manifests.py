"""The Grafana dashboard and the scrape config name only metrics and ports that exist."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from jidocode.shared.telemetry.metrics import REGISTRY, metrics_port

ROOT = Path(__file__).resolve().parents[3]
DASHBOARD = ROOT / "deploy" / "grafana" / "jidocode-dashboard.json"
DEPLOYMENTS = {
    "engine": "engine",
    "project": "project",
    "conversation": "conversation",
    "tool-runner": "tool_runner",
    "asset-loader": "asset_loader",
    "gateway": "gateway",
}


def _families() -> set[str]:
    return {metric.name for metric in REGISTRY.collect()}


def test_every_dashboard_query_names_a_metric_we_export() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    used = {
        re.sub(r"_(bucket|total|count|sum)$", "", m) for e in exprs for m in re.findall(r"jido_[a-z_]+", e)
    }
    assert used and used <= _families(), used - _families()
    # and every metric we export has a panel
    assert _families() <= used, _families() - used


@pytest.mark.parametrize(("name", "service"), sorted(DEPLOYMENTS.items()))
def test_each_deployment_is_scraped_where_its_service_serves(name: str, service: str) -> None:
    docs = yaml.safe_load_all((ROOT / "k8s" / "base" / f"{name}.yaml").read_text())
    [deployment] = [d for d in docs if d and d["kind"] == "Deployment"]
    template = deployment["spec"]["template"]
    annotations = template["metadata"]["annotations"]
    [container] = template["spec"]["containers"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    port = metrics_port(service, {k: v for k, v in env.items() if isinstance(v, str)})
    assert annotations["prometheus.io/scrape"] == "true"
    assert int(annotations["prometheus.io/port"]) == port
    assert {"name": "metrics", "containerPort": port} in container["ports"]


def test_the_service_monitor_scrapes_the_metrics_port() -> None:
    service, monitor = yaml.safe_load_all(
        (ROOT / "k8s" / "monitoring" / "servicemonitor.example.yaml").read_text()
    )
    assert monitor["kind"] == "ServiceMonitor"
    assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    assert [p["name"] for p in service["spec"]["ports"]] == [e["port"] for e in monitor["spec"]["endpoints"]]
    assert service["spec"]["ports"][0]["port"] == 9464
