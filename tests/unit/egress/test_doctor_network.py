"""``jidocode doctor``'s ``network`` line: the project's effective allowlist, the proxy tried here."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from jidocode.cli.main import app


def test_doctor_shows_the_allowlist_and_that_the_proxy_answers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("NATS_URL", raising=False)
    monkeypatch.setenv("JIDO_CODE_HOME", str(tmp_path / "jh"))
    monkeypatch.setenv("JIDO_DATA_HOME", str(tmp_path / "data"))
    (tmp_path / "jh").mkdir()
    settings = {
        "sandbox": {"allowed_domains": ["pypi.org", "*.npmjs.org"], "denied_domains": ["evil.example"]},
        "permissions": {
            "allow": ["Read", "WebFetch(domain:docs.python.org)"],
            "ask": ["WebFetch(domain:x.org)"],
        },
    }
    (tmp_path / "jh" / "settings.json").write_text(json.dumps(settings))
    project = tmp_path / "proj"
    project.mkdir()
    result = CliRunner().invoke(app, ["doctor", "--no-check", "--project", str(project)])
    assert "network:   ok" in result.output, result.output
    for line in (
        "allowed_domains: pypi.org, *.npmjs.org",
        "denied_domains: evil.example",
        "allow: WebFetch(domain:docs.python.org)",
        "ask: WebFetch(domain:x.org)",
    ):
        assert line in result.output, result.output
    report = json.loads(
        CliRunner().invoke(app, ["doctor", "--json", "--no-check", "-p", str(project)]).output
    )
    [network] = [c for c in report["checks"] if c["name"] == "network"]
    assert network["status"] == "ok" and "egress proxy answers" in network["detail"]
