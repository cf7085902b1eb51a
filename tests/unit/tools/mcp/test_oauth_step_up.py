"""A scope step-up (``403 insufficient_scope``, SEP-2350) carried from the tool runner to the
user's next login: the runner keeps the scope the server wants, the login asks for it."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest
from mcp.client.auth import OAuthClientProvider
from mcp.shared.auth import OAuthClientInformationFull, OAuthToken
from pydantic import AnyUrl

from jidocode.services.tool_runner.mcp.oauth import (
    LoginRequired,
    StoredLoginProvider,
    TokenFile,
    client_metadata,
    login_path,
    runner_auth,
)

URL = "https://mcp.example.com/mcp"
REDIRECT = "http://127.0.0.1:5555/callback"


def _logged_in(tmp_path: Path, granted: str) -> TokenFile:
    store = TokenFile(login_path(tmp_path, "docs", URL), URL)
    store.update(
        tokens=OAuthToken(access_token="a", refresh_token="r", scope=granted),
        client_info=OAuthClientInformationFull(client_id="c", redirect_uris=[AnyUrl(REDIRECT)]),
    )
    return store


async def _nothing(_url: str) -> None:
    return None


async def _refused_by_runner(store: TokenFile, wanted: str) -> None:
    """The runner's provider asks for an authorization of ``wanted`` (what the SDK does on a 401
    or a step-up), which the runner refuses."""
    provider = runner_auth(URL, store, login_needed=_nothing)
    assert isinstance(provider, OAuthClientProvider)
    provider.context.client_metadata.scope = wanted
    assert provider.context.redirect_handler is not None
    with pytest.raises(LoginRequired):
        await provider.context.redirect_handler("https://auth.example.com/authorize?client_id=c")


async def test_a_step_up_the_runner_refuses_is_kept_for_the_next_login(tmp_path: Path) -> None:
    store = _logged_in(tmp_path, "mcp:basic")
    await _refused_by_runner(store, "mcp:basic mcp:write")
    assert store.read().wanted_scope == "mcp:basic mcp:write"
    assert store.read().tokens is not None  # the login itself is kept as it was


async def test_a_new_login_for_the_granted_scope_keeps_no_wanted_scope(tmp_path: Path) -> None:
    store = _logged_in(tmp_path, "mcp:basic")
    await _refused_by_runner(store, "mcp:basic")  # a revoked grant: nothing more is wanted
    assert store.read().wanted_scope is None


class _Shown(Exception):
    """Stops the flow once the authorization URL is shown."""


async def test_the_login_asks_for_the_wanted_scope_next_to_the_401s(tmp_path: Path) -> None:
    store = TokenFile(tmp_path / "pending.json", URL)
    shown: list[str] = []

    async def show(url: str) -> None:
        shown.append(url)
        raise _Shown

    async def never() -> object:  # show stops the flow first
        raise AssertionError("no callback expected")

    provider = StoredLoginProvider(
        URL,
        store,
        client_metadata(REDIRECT),
        wanted_scope="mcp:write",
        redirect_handler=show,
        callback_handler=never,
    )
    provider.context.client_info = OAuthClientInformationFull(client_id="c", redirect_uris=[AnyUrl(REDIRECT)])
    provider.context.client_metadata.scope = "mcp:basic"  # what the server's 401 names
    with pytest.raises(_Shown):
        await provider._perform_authorization()
    assert parse_qs(urlsplit(shown[0]).query)["scope"] == ["mcp:basic mcp:write"]
