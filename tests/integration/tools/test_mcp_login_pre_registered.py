"""`jidocode mcp-servers login --client-id … --callback-port …` (the real CLI) against the local
authorization server of ``oauth_fixture.py``: the client the user registered there beforehand is
used, none is registered, and the browser comes back to the registered callback port."""

from __future__ import annotations

import asyncio
import os
import socket
import sys
from pathlib import Path
from urllib.parse import parse_qsl, urlsplit

import httpx
import pytest

from jidocode.services.tool_runner.mcp.oauth import TokenFile, login_path
from jidocode.shared.trust import trust_project
from tests.integration.tools.mcp_support import write_mcp_json
from tests.integration.tools.oauth_fixture import _Client, oauth_world

pytestmark = pytest.mark.slow

SERVER = "guarded"
CLIENT_ID = "registered-by-hand"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def _authorization_url(stdout: asyncio.StreamReader) -> str:
    while True:
        line = (await stdout.readline()).decode()
        assert line, "the CLI ended without printing an authorization URL"
        if line.startswith("http"):
            return line.strip()


async def test_the_login_uses_the_client_registered_beforehand(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home, data, root = tmp_path / "home", tmp_path / "data", tmp_path / "proj"
    for folder in (home, data, root):
        folder.mkdir()
    trust_project(root, home=home)
    monkeypatch.setenv("AUTHLIB_INSECURE_TRANSPORT", "1")  # the test's authorization server is on http://
    port = _free_port()
    redirect = f"http://127.0.0.1:{port}/callback"
    async with oauth_world() as world:
        world.auth.store.clients[CLIENT_ID] = _Client(CLIENT_ID, {"redirect_uris": [redirect]})
        write_mcp_json(home, {SERVER: {"type": "http", "url": world.url}})
        env = {**os.environ, "JIDO_CODE_HOME": str(home), "JIDO_DATA_HOME": str(data)}
        argv = ["login", str(root), SERVER, "--no-browser", "--client-id", CLIENT_ID]
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            "from jidocode.cli.main import app; app()",
            "mcp-servers",
            *argv,
            "--callback-port",
            str(port),
            env=env,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        assert proc.stdout is not None
        try:
            url = await asyncio.wait_for(_authorization_url(proc.stdout), 90)
            query = dict(parse_qsl(urlsplit(url).query))
            assert query["client_id"] == CLIENT_ID and query["redirect_uri"] == redirect
            async with httpx.AsyncClient() as browser:
                consent = await browser.get(url)
                assert consent.status_code == 302, consent.text
                landed = await browser.get(consent.headers["location"])
                assert landed.status_code == 200 and "logged in" in landed.text
            out, err = await asyncio.wait_for(proc.communicate(), 90)
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
        assert proc.returncode == 0, err.decode()
        assert f"logged in to {SERVER}" in out.decode()
        assert list(world.auth.store.clients) == [CLIENT_ID]  # nothing registered
        assert world.auth.store.tokens[-1].client_id == CLIENT_ID
        stored = TokenFile(login_path(data, SERVER, world.url), world.url).read()
        assert stored.client_info is not None and stored.client_info.client_id == CLIENT_ID
