"""A PRD provider CLI's own login (issue 29, point 3): its files and its hosts, only with ``use_login``.

The ``codex`` provider runs through the real sandbox (both modes; one this machine cannot run is
skipped with the reason) against a stand-in CLI: a Python script that reads its login file,
tries the user's SSH key, calls its API host through the proxy variables, and says what it found
as Codex's JSON events. A recording proxy stands for the egress proxy (it answers every request
itself); the context's opener hands it out and notes the domains asked for.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from jidocode.services.prd.config import load_config_report
from jidocode.services.prd.providers.base import IterationRequest, ProviderContext
from jidocode.services.prd.providers.login import CODEX, Login, login_files
from jidocode.services.prd.providers.registry import ProviderRegistry
from jidocode.shared.sandbox import Egress
from jidocode.shared.trust import trust_project
from tests.security.sandbox_support import CANARY_SECRET, MODES, make_project, skip_unless, write_global

LOGIN_CANARY = "login-canary-5d21"
STAND_IN = """#!/usr/bin/python3
import json, os, urllib.request
def read(path):
    try:
        return open(os.path.expanduser(path)).read()
    except OSError as exc:
        return "unreadable: %s" % exc.strerror
try:
    api = urllib.request.urlopen("http://api.openai.com/v1/models", timeout=20).read().decode()
except OSError as exc:
    api = "no network: %s" % exc
found = {"login": read("~/.codex/auth.json"), "ssh": read("~/.ssh/id_rsa"), "api": api}
print(json.dumps({"type": "thread.started", "thread_id": "t1"}), flush=True)
item = {"id": "m1", "type": "agent_message", "text": json.dumps(found)}
print(json.dumps({"type": "item.completed", "item": item}), flush=True)
print(json.dumps({"type": "turn.completed", "usage": {}}), flush=True)
"""
_ANSWER = b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\nConnection: close\r\n\r\nvia-proxy"


@dataclass
class Opened:
    """What the context's egress opener was asked for, and what the proxy saw."""

    egress: Egress
    asked: list[tuple[str, tuple[str, ...]]] = field(default_factory=list)
    requests: list[bytes] = field(default_factory=list)

    @asynccontextmanager
    async def open(self, key: str, domains: tuple[str, ...]) -> AsyncIterator[Egress]:
        self.asked.append((key, domains))
        yield self.egress


@pytest.fixture
async def proxy(tmp_path: Path) -> AsyncIterator[Opened]:
    seen: list[bytes] = []

    async def on(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        seen.append((await reader.readline()).strip())
        writer.write(_ANSWER)
        await writer.drain()
        writer.close()

    path = str(tmp_path / "egress.sock")
    unix = await asyncio.start_unix_server(on, path)
    tcp = await asyncio.start_server(on, "127.0.0.1", 0)
    yield Opened(Egress(socket=path, port=tcp.sockets[0].getsockname()[1]), requests=seen)
    for server in (unix, tcp):
        server.close()
        await server.wait_closed()


@pytest.fixture(params=MODES)
def home(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[str, Path]:
    """The sandbox mode, and a home with a Codex login and an SSH key."""
    skip_unless(request.param)
    home = tmp_path / "home"
    (home / ".codex").mkdir(parents=True)
    (home / ".codex" / "auth.json").write_text(json.dumps({"OPENAI_API_KEY": LOGIN_CANARY}))
    (home / ".ssh").mkdir()
    (home / ".ssh" / "id_rsa").write_text(CANARY_SECRET)
    monkeypatch.setenv("HOME", str(home))
    return request.param, home


async def _run_codex(tmp_path: Path, mode: str, opened: Opened, *, use_login: bool) -> dict[str, str]:
    jido_home = tmp_path / "jido_home"
    write_global(jido_home, {"mode": mode})
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    cli = bin_dir / "codex-stand-in"
    cli.write_text(STAND_IN)
    cli.chmod(0o755)
    context = ProviderContext(
        jido_home=str(jido_home), additional_directories=(str(bin_dir),), egress=opened.open
    )
    registry = ProviderRegistry({"codex": {"command": str(cli), "use_login": use_login}})
    provider = registry.resolve("codex", context)
    root = make_project(tmp_path / f"proj-{use_login}")
    run = await provider.run_iteration(IterationRequest(work_dir=str(root), prompt="go"))
    texts = [event.text async for event in run.events() if event.kind == "assistant_text"]
    result = await run.result()
    assert result.ok, result
    found: dict[str, str] = json.loads(texts[0])
    return found


async def test_the_login_is_read_and_its_host_reached_only_with_use_login(
    tmp_path: Path, home: tuple[str, Path], proxy: Opened
) -> None:
    mode, _ = home
    found = await _run_codex(tmp_path, mode, proxy, use_login=True)
    assert LOGIN_CANARY in found["login"], found
    assert CANARY_SECRET not in found["ssh"] and found["ssh"].startswith("unreadable"), found
    assert found["api"] == "via-proxy", found
    assert proxy.asked == [("codex", CODEX.domains)]
    assert proxy.requests == [b"GET http://api.openai.com/v1/models HTTP/1.1"]

    found = await _run_codex(tmp_path, mode, proxy, use_login=False)
    assert LOGIN_CANARY not in found["login"] and found["login"].startswith("unreadable"), found
    assert found["api"].startswith("no network"), found
    assert len(proxy.asked) == 1 and len(proxy.requests) == 1  # the second run asked for nothing


def test_use_login_is_read_from_the_users_layers_only(tmp_path: Path) -> None:
    jido_home = tmp_path / "jido_home"
    write_global(jido_home, {}, prd={"providers": {"codex": {"use_login": True}}})
    root = make_project(tmp_path / "proj")
    (root / ".jido" / "settings.json").write_text(
        json.dumps({"prd": {"providers": {"claude": {"use_login": True, "model": "m"}}}})
    )
    trust_project(root, home=jido_home)
    env = {"HOME": str(tmp_path / "home"), "XDG_CONFIG_HOME": str(tmp_path / "xdg")}
    loaded = load_config_report(str(root), env=env, jido_home=str(jido_home))
    providers = loaded.config.providers
    assert providers["codex"].use_login is True
    assert providers["claude"].use_login is False and providers["claude"].model == "m"
    assert any("prd.providers.claude.use_login: ignored" in line for line in loaded.ignored)


def test_login_files_stay_in_the_home(tmp_path: Path) -> None:
    home = tmp_path / "home"
    (home / ".codex").mkdir(parents=True)
    elsewhere = tmp_path / "elsewhere.json"
    elsewhere.write_text("{}")
    (home / ".codex" / "auth.json").symlink_to(elsewhere)
    assert login_files(CODEX, str(home)) == []  # a link out of the home is not opened
    (home / ".codex" / "auth.json").unlink()
    (home / ".codex" / "auth.json").write_text("{}")
    assert login_files(CODEX, str(home)) == [str(home / ".codex" / "auth.json")]
    with pytest.raises(ValueError, match="under the home"):
        Login(files=("../.ssh/id_rsa",))
