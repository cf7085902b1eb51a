"""A PRD provider CLI's network through the PRD service's own egress proxy (issue 29).

One system for the module: NATS, the engine and the real PRD service (its default provider
resolver, so its proxy is the one ``prd run`` uses). The ``codex`` provider is a stand-in CLI
(a script registered as the provider's command in the user's settings) that reads its login
file and the user's SSH key, calls its API host, another host, and its API host on the NATS
port, and writes what it found into the work dir. Its declared domain and another name map
(``JIDO_EGRESS_HOSTS``) to a web server on this machine's LAN address; the user's
``sandbox.allowed_domains`` names that address's network, as a company routing the model API
through a private gateway would. A listener on the LAN address at the NATS port stands for the
bus: the runtime's own endpoint, refused by this proxy too whatever the entries say.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import pytest_asyncio

from jidocode.services.prd import service as prd_service
from jidocode.services.prd.egress import PushNetwork, login_proxy
from jidocode.services.prd.gitpush import NetworkRemote
from jidocode.services.prd.prompt import DONE_MARKER
from jidocode.services.registry import serve_many
from jidocode.shared.bus import Bus
from jidocode.shared.clients import EngineClient, PrdClient
from jidocode.shared.config import Config
from jidocode.shared.errors import PermissionDenied
from jidocode.shared.events.prd import StoryDraft
from jidocode.shared.natsserver import NatsServer
from jidocode.shared.trust import trust_project
from tests.helpers import wait_for_services
from tests.integration.egress.support import Internet, internet, lan_address
from tests.integration.prd.helpers import WAIT, Events, git_repo
from tests.security.sandbox_support import CANARY_SECRET, MODES, skip_unless

pytestmark = pytest.mark.asyncio(loop_scope="module")

LAN = lan_address()
LOGIN_CANARY = "login-canary-91c4"
API = "api.openai.com"  # the codex flavor's declared API host, mapped to the stand-in internet

STAND_IN = """#!/usr/bin/python3
import json, os, urllib.error, urllib.request
def read(path):
    try:
        return open(os.path.expanduser(path)).read()
    except OSError as exc:
        return "unreadable: %s" % exc.strerror
def get(url):
    try:
        return urllib.request.urlopen(url, timeout=20).read().decode()
    except urllib.error.HTTPError as exc:
        return "refused %d: %s" % (exc.code, exc.read().decode())
    except OSError as exc:
        return "no network: %s" % exc
found = {
    "login": read("~/.codex/auth.json"),
    "ssh": read("~/.ssh/id_rsa"),
    "api": get("http://API:PORT/plain"),
    "other": get("http://other.test:PORT/plain"),
    "nats": get("http://API:NATS/"),
    "run": os.urandom(8).hex(),  # each run changes the file: the loop commits a change
}
with open("found.json", "w") as out:
    json.dump(found, out)
print(json.dumps({"type": "thread.started", "thread_id": "t1"}), flush=True)
item = {"id": "m1", "type": "agent_message", "text": "looked around\\nDONE"}
print(json.dumps({"type": "item.completed", "item": item}), flush=True)
print(json.dumps({"type": "turn.completed", "usage": {}}), flush=True)
"""


@dataclass
class System:
    bus: Bus
    config: Config
    root: Path
    jido_home: Path
    cli: Path
    web: Internet
    prds: PrdClient
    events: Events

    def settings(self, mode: str, *, use_login: bool) -> None:
        """The user's settings: the sandbox ``mode``, the LAN network allowed, the stand-in as
        the ``codex`` provider's command (its directory visible) with ``use_login``."""
        codex = {"command": str(self.cli), "use_login": use_login}
        settings = {
            "sandbox": {"mode": mode, "allowed_domains": [f"{LAN}/32"]},
            "permissions": {"additional_directories": [str(self.cli.parent)]},
            "prd": {"provider": "codex", "retry": {"max_retries": 0}, "providers": {"codex": codex}},
        }
        (self.jido_home / "settings.json").write_text(json.dumps(settings))

    async def run(self, name: str) -> dict[str, str]:
        """Run a one-story PRD ``name`` to completion; what the stand-in found."""
        await self.prds.create(name, title=name, stories=[StoryDraft(title=f"{name} story")])
        await self.prds.run(name)
        await self.events.wait(lambda: self._ended(name) is not None)
        assert self._ended(name) == "completed", self.events.summary()
        found: dict[str, str] = json.loads((self.root / "found.json").read_text())
        return found

    def _ended(self, name: str) -> str | None:
        """The state ``name``'s loop ended in (``None``: it runs on)."""
        states = [e["to_state"] for e in self.events.of(name, "prd.loop.state_changed")]
        return next((s for s in states if s in ("completed", "error", "stopped")), None)


def _stand_in(path: Path, web_port: int, nats_port: int) -> Path:
    text = STAND_IN.replace("API", API).replace("PORT", str(web_port)).replace("NATS", str(nats_port))
    path.write_text(text.replace("DONE", DONE_MARKER))
    path.chmod(0o755)
    return path


async def _bus_stand_in(address: str, port: int) -> asyncio.Server:
    """A listener where the bus would be, answering any request (so reaching it shows)."""

    async def on(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readline()
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 7\r\nConnection: close\r\n\r\nthe-bus")
        await writer.drain()
        writer.close()

    return await asyncio.start_server(on, address, port)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def system(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[System]:
    if LAN is None:
        pytest.skip("this machine has no non-loopback address for the stand-in internet")
    base = tmp_path_factory.mktemp("prdegress")
    jido_home, user_home, bin_dir = base / "jido", base / "home", base / "bin"
    for d in (jido_home, user_home / ".codex", user_home / ".ssh", bin_dir):
        d.mkdir(parents=True)
    (user_home / ".codex" / "auth.json").write_text(json.dumps({"OPENAI_API_KEY": LOGIN_CANARY}))
    (user_home / ".ssh" / "id_rsa").write_text(CANARY_SECRET)
    root = git_repo(base / "repo")
    trust_project(root, home=jido_home)
    server = NatsServer(store_dir=base / "js", sync="default").start()
    mp = pytest.MonkeyPatch()
    mp.setenv("HOME", str(user_home))
    mp.setenv("JIDO_CODE_HOME", str(jido_home))
    mp.setenv("JIDO_EGRESS_HOSTS", f"{API}={LAN},other.test={LAN}")
    config = Config(nats_url=server.url, jido_home=jido_home, instance="test")
    stop = asyncio.Event()
    tasks = [
        asyncio.create_task(serve_many(config, stop, names=("engine",))),
        asyncio.create_task(prd_service.serve(config, stop)),
    ]
    try:
        async with internet(LAN) as web, await _bus_stand_in(LAN, server.port):
            await wait_for_services(config, timeout=WAIT, names=("engine", "prd"))
            bus = await Bus.connect(config, "test")
            try:
                info = await EngineClient(bus).start_project(str(root), timeout=30)
                events = Events()
                await events.follow(bus, info.project_id)
                prds = PrdClient(bus, info.project_id, timeout=120)
                cli = _stand_in(bin_dir / "codex-stand-in", web.port, server.port)
                yield System(bus, config, root, jido_home, cli, web, prds, events)
            finally:
                await bus.close()
    finally:
        stop.set()
        await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), 30)
        server.stop()
        mp.undo()


@pytest.mark.parametrize("mode", MODES)
async def test_a_provider_cli_reads_its_login_and_reaches_its_domain_only_with_use_login(
    system: System, mode: str
) -> None:
    skip_unless(mode)
    system.settings(mode, use_login=True)
    found = await system.run(f"on-{mode}")
    assert LOGIN_CANARY in found["login"], found
    assert CANARY_SECRET not in found["ssh"] and found["ssh"].startswith("unreadable"), found
    assert found["api"].startswith(f"hello {API}"), found
    assert found["other"].startswith("refused 403") and "in no allowed entry" in found["other"], found
    # its declared host, on an allowed network, at the bus's port: the runtime's own endpoint
    assert found["nats"].startswith("refused 403") and "runtime's own endpoint" in found["nats"], found

    system.settings(mode, use_login=False)
    found = await system.run(f"off-{mode}")
    assert LOGIN_CANARY not in found["login"] and found["login"].startswith("unreadable"), found
    for key in ("api", "other", "nats"):
        assert found[key].startswith("no network"), found


async def test_a_push_pass_is_refused_the_bus_port_on_an_allowed_network(system: System) -> None:
    """The push's decision ahead of the merge refuses what the PRD proxy refuses: the NATS port."""
    assert LAN is not None
    system.settings("auto", use_login=False)
    port = int(system.config.nats_url.rsplit(":", 1)[1])
    network = PushNetwork(login_proxy(system.bus, system.config), system.jido_home, os.environ)
    remote = NetworkRemote(url=f"http://{LAN}:{port}/x.git", scheme="http", host=LAN, port=port)
    try:
        with pytest.raises(PermissionDenied, match="runtime's own endpoint"):
            await network.scope("p1", "x", remote)
    finally:
        await network.proxy.close()
