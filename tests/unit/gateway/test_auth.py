"""The gateway's token: generated once, kept 0600, compared exactly; settings validated."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError
from starlette.requests import HTTPConnection

from jidocode.services.gateway.auth import COOKIE, TokenChecker, load_or_create_token, token_file
from jidocode.services.gateway.settings import GatewaySettings


def test_token_is_generated_once_and_kept_private(tmp_path: Path) -> None:
    first = load_or_create_token(tmp_path)
    assert len(first) >= 40
    path = token_file(tmp_path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert load_or_create_token(tmp_path) == first
    assert load_or_create_token(tmp_path / "other") != first


def test_a_token_file_readable_by_others_is_closed(tmp_path: Path) -> None:
    token = load_or_create_token(tmp_path)
    token_file(tmp_path).chmod(0o644)
    assert load_or_create_token(tmp_path) == token
    assert stat.S_IMODE(token_file(tmp_path).stat().st_mode) == 0o600


def _conn(headers: dict[str, str]) -> HTTPConnection:
    raw = [(k.lower().encode(), v.encode()) for k, v in headers.items()]
    return HTTPConnection({"type": "http", "headers": raw, "path": "/", "query_string": b""})


def test_bearer_or_cookie_shows_the_token() -> None:
    checker = TokenChecker("t" * 30)
    assert checker.allows(_conn({"Authorization": "Bearer " + "t" * 30}))
    assert checker.allows(_conn({"authorization": "bearer " + "t" * 30}))
    assert checker.allows(_conn({"Cookie": f"{COOKIE}={'t' * 30}"}))
    assert not checker.allows(_conn({}))
    assert not checker.allows(_conn({"Authorization": "Basic " + "t" * 30}))
    assert not checker.allows(_conn({"Authorization": "Bearer " + "t" * 29}))
    assert not checker.allows(_conn({"Cookie": f"other={'t' * 30}"}))
    assert "t" * 30 not in repr(checker)


@given(st.text(max_size=64))
def test_only_the_exact_token_matches(candidate: str) -> None:
    token = "A" * 32
    assert TokenChecker(token).matches(candidate) == (candidate == token)


def test_settings_refuse_a_short_or_odd_token_and_a_bad_port() -> None:
    with pytest.raises(ValidationError, match="token"):
        GatewaySettings(token="short")
    with pytest.raises(ValidationError, match="JIDO_GATEWAY_TOKEN"):
        GatewaySettings(token="x" * 30 + " y")
    with pytest.raises(ValidationError, match="port"):
        GatewaySettings(port=70000)


def test_settings_from_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("JIDO_GATEWAY_PORT", "9999")
    monkeypatch.setenv("JIDO_GATEWAY_HOST", "0.0.0.0")
    monkeypatch.setenv("JIDO_GATEWAY_CORS_ORIGINS", "https://a.example, https://b.example")
    settings = GatewaySettings.from_env(data_home=tmp_path)
    assert (settings.host, settings.port) == ("0.0.0.0", 9999)
    assert settings.cors_origins == ("https://a.example", "https://b.example")
    assert settings.token is None and settings.base_url == "http://0.0.0.0:9999"
    assert GatewaySettings().cors_origins == ()  # CORS off by default
