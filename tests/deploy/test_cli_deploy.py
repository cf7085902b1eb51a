"""`jidocode deploy …`: the files it writes are what nats-server and Kubernetes accept."""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from jidocode.cli.deploy import app, cluster_nodes, env_file, generate_passwords, k8s_secret
from jidocode.shared import nats_permissions as perms
from jidocode.shared.natsserver import find_nats_server

runner = CliRunner()


def _check_config(conf: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """``nats-server -t``: parse and validate a config without starting the server."""
    return subprocess.run(
        [find_nats_server(), "-t", "-c", str(conf)],
        capture_output=True,
        text=True,
        env={**os.environ, **env},
        cwd=conf.parent,
        timeout=30,
        check=False,
    )


def test_nats_config_with_env_references_is_valid_once_passwords_are_set(tmp_path: Path) -> None:
    result = runner.invoke(app, ["nats-config", "--out", str(tmp_path), "--nodes", "3"])
    assert result.exit_code == 0, result.output
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == ["auth.conf", "nats-1.conf", "nats-2.conf", "nats-3.conf"]
    passwords = {perms.password_env_var(u): pw for u, pw in generate_passwords().items()}
    checked = _check_config(tmp_path / "nats-1.conf", passwords)
    assert checked.returncode == 0, checked.stderr
    # Without the variables the server refuses to start rather than run without users.
    missing = _check_config(tmp_path / "nats-2.conf", {})
    assert missing.returncode != 0
    assert "JIDO_NATS_PASSWORD_" in missing.stderr


def test_nats_config_with_passwords_writes_secret_files(tmp_path: Path) -> None:
    result = runner.invoke(app, ["nats-config", "--out", str(tmp_path), "--nodes", "1", "--with-passwords"])
    assert result.exit_code == 0, result.output
    for secret in ("auth.conf", "credentials.env"):
        assert stat.S_IMODE((tmp_path / secret).stat().st_mode) == 0o600
    assert _check_config(tmp_path / "nats-1.conf", {}).returncode == 0
    assert "cluster" not in (tmp_path / "nats-1.conf").read_text()
    creds = dict(
        line.split("=", 1) for line in (tmp_path / "credentials.env").read_text().splitlines() if "=" in line
    )
    assert set(creds) == {perms.password_env_var(u) for u in perms.USERS}
    assert all(f'"{pw}"' in (tmp_path / "auth.conf").read_text() for pw in creds.values())


def test_env_command_refuses_to_overwrite(tmp_path: Path) -> None:
    out = tmp_path / ".env"
    assert runner.invoke(app, ["env", "--out", str(out)]).exit_code == 0
    first = out.read_text()
    again = runner.invoke(app, ["env", "--out", str(out)])
    assert again.exit_code == 1
    assert out.read_text() == first
    assert runner.invoke(app, ["env", "--out", str(out), "--force"]).exit_code == 0
    assert out.read_text() != first


def test_k8s_secrets_carry_passwords_and_llm_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    result = runner.invoke(app, ["k8s-secrets", "--namespace", "jido"])
    assert result.exit_code == 0, result.output
    doc = yaml.safe_load(result.output)
    assert doc["kind"] == "Secret"
    assert doc["metadata"]["namespace"] == "jido"
    assert doc["stringData"]["OPENAI_API_KEY"] == "sk-test"
    assert "ANTHROPIC_API_KEY" not in doc["stringData"]
    for user in perms.USERS:
        assert doc["stringData"][perms.password_env_var(user)].startswith("p")


def test_users_command_lists_every_user() -> None:
    result = runner.invoke(app, ["users"])
    assert result.exit_code == 0
    for user in perms.USERS:
        assert perms.inbox_prefix(user) in result.output


def test_pure_helpers() -> None:
    nodes = cluster_nodes(3)
    assert [n.server_name for n in nodes] == ["nats-1", "nats-2", "nats-3"]
    assert nodes[0].routes == ("nats://nats-2:6222", "nats://nats-3:6222")
    for bad in (0, 8):
        with pytest.raises(ValueError, match="1 to 7"):
            cluster_nodes(bad)
    pw = generate_passwords()
    assert env_file(pw).count("JIDO_NATS_PASSWORD_") == len(perms.USERS)
    assert "namespace" not in k8s_secret(pw)
