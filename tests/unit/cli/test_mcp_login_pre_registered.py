"""`jidocode mcp-servers login --client-id`: a client the user registered at an authorization
server without dynamic registration; its secret comes from an environment variable."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from jidocode.cli.main import app
from jidocode.services.tool_runner.mcp.login import PreRegistered


def _run(*argv: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, ["mcp-servers", "login", *argv])
    return result.exit_code, " ".join((result.stdout + result.stderr).split())


def test_a_missing_secret_variable_or_an_empty_client_id_is_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("JIDO_CODE_HOME", str(tmp_path))
    monkeypatch.delenv("DOCS_SECRET", raising=False)
    code, out = _run(str(tmp_path), "docs", "--client-id", "c1", "--client-secret-env", "DOCS_SECRET")
    assert code == 2 and "the environment variable DOCS_SECRET is not set" in out
    code, out = _run(str(tmp_path), "docs", "--client-secret-env", "DOCS_SECRET")
    assert code == 2 and "--client-secret-env needs --client-id" in out
    code, out = _run(str(tmp_path), "docs", "--client-id", "")
    assert code == 2 and "--client-id: String should have at least 1 character" in out


def test_a_client_with_a_secret_authenticates_by_http_basic_one_without_is_public() -> None:
    redirect = "http://127.0.0.1:8765/callback"
    confidential = PreRegistered(client_id="c1", client_secret="s3cret", callback_port=8765).client_info(
        redirect
    )
    assert confidential.token_endpoint_auth_method == "client_secret_basic"
    assert confidential.client_secret == "s3cret" and [str(u) for u in confidential.redirect_uris or []] == [
        redirect
    ]
    public = PreRegistered(client_id="c1").client_info(redirect)
    assert public.token_endpoint_auth_method == "none" and public.client_secret is None
