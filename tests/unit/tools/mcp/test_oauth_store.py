"""The stored OAuth login of an HTTP MCP server: where it lives, how it is read and written."""

from __future__ import annotations

import inspect
import os
import stat
import time
from pathlib import Path

import pytest
from mcp.client.auth import OAuthClientProvider
from mcp.shared.auth import OAuthToken

from jidocode.services.tool_runner.mcp.oauth import LOGIN_DIR, TokenFile, login_path
from jidocode.shared.errors import InvalidInput

URL = "https://mcp.example.com/mcp"


def test_the_login_is_per_server_and_url_in_the_data_home(tmp_path: Path) -> None:
    path = login_path(tmp_path / "data", "docs", URL)
    assert path.parent == (tmp_path / "data" / LOGIN_DIR).resolve()
    assert path.name.startswith("docs-") and path != login_path(tmp_path / "data", "docs", URL + "2")


def test_a_data_home_inside_the_project_is_refused(tmp_path: Path) -> None:
    with pytest.raises(InvalidInput, match="never kept in a project"):
        login_path(tmp_path / "proj" / "data", "docs", URL, project_root=str(tmp_path / "proj"))


async def test_tokens_are_written_0600_with_their_absolute_expiry(tmp_path: Path) -> None:
    store = TokenFile(login_path(tmp_path, "docs", URL), URL)
    await store.set_tokens(OAuthToken(access_token="a", refresh_token="r", expires_in=3600))
    assert stat.S_IMODE(store.path.stat().st_mode) == 0o600
    assert stat.S_IMODE(store.path.parent.stat().st_mode) == 0o700
    got = await store.get_tokens()
    assert got is not None and got.refresh_token == "r" and 3500 < (got.expires_in or 0) <= 3600
    store.update(expires_at=time.time() - 10)
    expired = await store.get_tokens()
    assert expired is not None and expired.expires_in == 0  # the provider refreshes it


async def test_a_broken_linked_or_foreign_file_holds_no_login(tmp_path: Path) -> None:
    store = TokenFile(login_path(tmp_path, "docs", URL), URL)
    store.path.parent.mkdir(parents=True)
    store.path.write_text("{not json")
    assert await store.get_tokens() is None
    store.path.write_text('{"url": "https://other.example.com/mcp", "tokens": {"access_token": "x"}}')
    assert await store.get_tokens() is None  # a login of another URL is not this one's
    store.path.unlink()
    target = tmp_path / "elsewhere.json"
    target.write_text(f'{{"url": "{URL}", "tokens": {{"access_token": "x"}}}}')
    os.symlink(target, store.path)
    assert await store.get_tokens() is None  # a link is not followed
    assert store.forget() and not store.path.exists() and target.exists()


def test_the_sdk_still_has_the_hooks_the_stored_login_provider_extends() -> None:
    """StoredLoginProvider restores expiry and metadata in these (python-sdk #3250): an SDK
    upgrade that renames them must fail here, not silently stop refreshing."""
    for name in ("_initialize", "_handle_token_response"):
        assert inspect.iscoroutinefunction(getattr(OAuthClientProvider, name))
