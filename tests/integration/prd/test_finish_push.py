"""`prd finish --push` to an HTTP remote through the PRD service's egress proxy (decision 0343).

A smart-HTTP git server (``git http-backend`` behind a small HTTP server of the test, receive-pack
on, a Basic token required) listens on this machine's LAN address, the stand-in internet; the
test names map to it through ``JIDO_EGRESS_HOSTS`` (loopback is always refused). The real prd
and engine services run on a real nats-server; the push's git runs in the real sandbox, under
each sandbox in turn (the user's ``sandbox.mode``).

Checked: the push arrives with the token the user's ``prd.push.tokens`` names, while no
process's command line holds the token and only git's environment does; the project's
``.git/config`` never has it; a remote on a denied host is refused naming it before anything
changes; so is a repository whose configuration rewrites the push's URL; a pass of the push
reaches its remote's host and port and nothing else.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import shutil
import subprocess
import threading
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import pytest_asyncio
from click.testing import Result
from typer.testing import CliRunner

from jidocode.cli.main import app
from jidocode.services.prd import service as prd_service
from jidocode.services.prd.config import PrdConfig
from jidocode.services.prd.egress import PushNetwork, login_proxy
from jidocode.services.prd.gitpush import TOKEN_USER, NetworkRemote
from jidocode.services.prd.loop import LoopSettings
from jidocode.services.prd.providers.base import Provider
from jidocode.services.registry import serve_many
from jidocode.shared.bus import Bus
from jidocode.shared.clients import EngineClient, PrdClient
from jidocode.shared.config import Config
from jidocode.shared.events.prd import StoryDraft
from jidocode.shared.natsserver import NatsServer
from jidocode.shared.trust import trust_project
from tests.helpers import wait_for_services
from tests.integration.egress.support import lan_address
from tests.security.sandbox_support import MODES, skip_unless

from .helpers import WAIT, Events, git, git_repo
from .instant import Act, InstantProvider

pytestmark = pytest.mark.asyncio(loop_scope="module")

LAN = lan_address()
TOKEN = "push-token-5b1e0c7d"
TOKEN_ENV = "JIDO_TEST_PUSH_TOKEN"
EXPECTED_AUTH = "Basic " + base64.b64encode(f"{TOKEN_USER}:{TOKEN}".encode()).decode()


# --- the smart-HTTP git server ---------------------------------------------------------------


@dataclass
class GitServer:
    """``git http-backend`` over HTTP on ``address``; what it saw of the token while pushed to."""

    repos: Path
    address: str
    port: int = 0
    auths: list[str] = field(default_factory=list)
    #: ``(pid, comm)`` of each process whose command line held the token during a receive-pack.
    argv_leaks: list[tuple[int, str]] = field(default_factory=list)
    #: ``comm`` of each process whose environment held the token during a receive-pack.
    env_holders: set[str] = field(default_factory=set)

    def url(self, name: str, repo: str) -> str:
        return f"http://{name}:{self.port}/{repo}"


def _holders(*markers: bytes) -> tuple[list[tuple[int, str]], set[str]]:
    """Processes of this user whose command line, and whose environment, contain a ``marker``."""
    in_argv: list[tuple[int, str]] = []
    in_env: set[str] = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            comm = Path(f"/proc/{entry}/comm").read_text().strip()
            if any(m in Path(f"/proc/{entry}/cmdline").read_bytes() for m in markers):
                in_argv.append((int(entry), comm))
            if any(m in Path(f"/proc/{entry}/environ").read_bytes() for m in markers):
                in_env.add(comm)
        except OSError:  # gone, or not ours
            continue
    return in_argv, in_env


def _body(handler: BaseHTTPRequestHandler) -> bytes:
    if handler.headers.get("Transfer-Encoding", "").lower() == "chunked":
        out = b""
        while size := int(handler.rfile.readline().strip() or b"0", 16):
            out += handler.rfile.read(size)
            handler.rfile.readline()
        handler.rfile.readline()
        return out
    return handler.rfile.read(int(handler.headers.get("Content-Length") or 0))


def _handler(server: GitServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:
            return None

        def do_GET(self) -> None:
            self._backend()

        def do_POST(self) -> None:
            self._backend()

        def _backend(self) -> None:
            body = _body(self) if self.command == "POST" else b""
            auth = self.headers.get("Authorization", "")
            server.auths.append(auth)
            if auth != EXPECTED_AUTH:
                self.send_response(401)
                self.send_header("WWW-Authenticate", 'Basic realm="git"')
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            url = urlsplit(self.path)
            if url.path.endswith("/git-receive-pack"):  # git is waiting for this answer now
                argv, env = _holders(TOKEN.encode(), EXPECTED_AUTH.split()[1].encode())
                server.argv_leaks += argv
                server.env_holders |= env
            cgi = {
                "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
                "GIT_PROJECT_ROOT": str(server.repos),
                "GIT_HTTP_EXPORT_ALL": "1",
                "REQUEST_METHOD": self.command,
                "PATH_INFO": url.path,
                "QUERY_STRING": url.query,
                "CONTENT_TYPE": self.headers.get("Content-Type", ""),
                "CONTENT_LENGTH": str(len(body)),
                "HTTP_CONTENT_ENCODING": self.headers.get("Content-Encoding", ""),
                "HTTP_GIT_PROTOCOL": self.headers.get("Git-Protocol", ""),
                "REMOTE_USER": TOKEN_USER,
                "REMOTE_ADDR": self.client_address[0],
            }
            done = subprocess.run(
                ["git", "http-backend"], input=body, env=cgi, capture_output=True, timeout=60
            )
            head, _, payload = done.stdout.partition(b"\r\n\r\n")
            headers = [line.split(":", 1) for line in head.decode("latin-1").split("\r\n") if ":" in line]
            status = next((v.strip() for k, v in headers if k.lower() == "status"), "200 OK")
            self.send_response(int(status.split()[0]))
            for key, value in headers:
                if key.lower() != "status":
                    self.send_header(key, value.strip())
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

    return Handler


@pytest.fixture(scope="module")
def git_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GitServer]:
    if LAN is None:
        pytest.skip("this machine has no non-loopback address for the stand-in internet")
    repos = tmp_path_factory.mktemp("served")
    state = GitServer(repos, LAN)
    httpd = ThreadingHTTPServer((LAN, 0), _handler(state))
    state.port = int(httpd.server_address[1])
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield state
    finally:
        httpd.shutdown()
        httpd.server_close()


def served_repo(server: GitServer, name: str) -> Path:
    """A new bare repository the server serves, receive-pack on."""
    path = server.repos / name
    git(server.repos, "init", "-q", "--bare", str(path))
    git(path, "config", "http.receivepack", "true")
    return path


# --- the system ------------------------------------------------------------------------------


@dataclass
class System:
    bus: Bus
    root: Path
    home: Path
    prds: PrdClient
    provider: InstantProvider
    events: Events
    env: dict[str, str]
    server: GitServer

    async def cli(self, *args: str) -> Result:
        runner = CliRunner()
        return await asyncio.wait_for(asyncio.to_thread(runner.invoke, app, list(args), env=self.env), WAIT)

    def settings(self, mode: str) -> None:
        """The user's settings: the push's token and plain-http hosts, the sandbox ``mode``, the
        LAN address allowed (a private address), ``bad.test`` denied."""
        sandbox = {"mode": mode, "allowed_domains": [f"{LAN}/32"], "denied_domains": ["bad.test"]}
        push = {"tokens": {"git.test": TOKEN_ENV}, "plain_http": ["git.test", "bad.test"]}
        prd = {"retry": {"max_retries": 0}, "push": push}
        (self.home / "settings.json").write_text(json.dumps({"sandbox": sandbox, "prd": prd}))

    async def finished_loop(self, name: str) -> str:
        """A PRD ``name`` whose loop ran in the root on its own branch (one file written)."""
        git(self.root, "switch", "-q", "main")
        self.provider.scripts[f"{name}/US-001"] = [Act(write={f"{name}.txt": f"{name}\n"})]
        await self.prds.create(name, title=name.title(), stories=[StoryDraft(title=f"{name} file")])
        info = await self.prds.run(name, branch=f"feat/{name}")
        await self.events.wait_state(name, "completed")
        return info.branch


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def system(tmp_path_factory: pytest.TempPathFactory, git_server: GitServer) -> AsyncIterator[System]:
    base = tmp_path_factory.mktemp("prdpush")
    home = base / "home"
    home.mkdir()
    root = git_repo(base / "repo")
    trust_project(root, home=home)
    server = NatsServer(store_dir=base / "js", sync="default").start()
    names = ",".join(f"{n}={LAN}" for n in ("git.test", "bad.test", "other.test"))
    mp = pytest.MonkeyPatch()
    mp.setenv("JIDO_CODE_HOME", str(home))
    mp.setenv("JIDO_EGRESS_HOSTS", names)
    mp.setenv(TOKEN_ENV, TOKEN)
    config = Config(nats_url=server.url, jido_home=home, instance="test")
    provider = InstantProvider()

    def resolve(key: str, project_id: str, cfg: PrdConfig) -> Provider:
        return provider

    stop = asyncio.Event()
    tasks = [
        asyncio.create_task(serve_many(config, stop, names=("engine",))),
        asyncio.create_task(
            prd_service.serve(
                config, stop, resolve_provider=resolve, settings=LoopSettings(heartbeat_s=0.5, lease_s=3.0)
            )
        ),
    ]
    try:
        await wait_for_services(config, timeout=WAIT, names=("engine", "prd"))
        bus = await Bus.connect(config, "test")
        try:
            info = await EngineClient(bus).start_project(str(root), timeout=30)
            events = Events()
            await events.follow(bus, info.project_id)
            env = {"NATS_URL": server.url, "JIDO_CODE_HOME": str(home), "COLUMNS": "200"}
            prds = PrdClient(bus, info.project_id, timeout=120)
            system = System(bus, root, home, prds, provider, events, env, git_server)
            system.settings("auto")
            yield system
        finally:
            await bus.close()
    finally:
        stop.set()
        await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), 30)
        server.stop()
        mp.undo()


def _flat(result: Result) -> str:
    return " ".join(result.output.split())


@pytest.mark.parametrize("mode", MODES)
async def test_finish_pushes_through_the_proxy_with_the_users_token_kept_from_the_project(
    system: System, mode: str
) -> None:
    skip_unless(mode)
    system.settings(mode)
    name = f"push{mode[:4]}"
    branch = await system.finished_loop(name)
    remote = served_repo(system.server, f"{name}.git")
    git(system.root, "remote", "add", name, system.server.url("git.test", f"{name}.git"))
    system.server.argv_leaks.clear()
    system.server.env_holders.clear()

    finished = await system.cli("prd", "finish", str(system.root), name, "--push", "--remote", name)
    assert finished.exit_code == 0, finished.output
    assert f"pushed main to {name}" in _flat(finished)
    tip = git(system.root, "rev-parse", "main")
    assert git(remote, "rev-parse", "refs/heads/main") == tip
    assert git(system.root, "rev-parse", branch) == tip  # a fast-forward
    # the token arrived, in git's environment only: never a command line, never a config file
    assert EXPECTED_AUTH in system.server.auths
    assert system.server.argv_leaks == []
    assert system.server.env_holders and system.server.env_holders <= {"git", "git-remote-http"}
    assert TOKEN not in (system.root / ".git/config").read_text()


async def test_a_remote_on_a_denied_host_is_refused_naming_it(system: System) -> None:
    system.settings("auto")
    await system.finished_loop("denied")
    before = git(system.root, "rev-parse", "main")
    git(system.root, "remote", "add", "denied", system.server.url("bad.test", "denied.git"))

    refused = await system.cli("prd", "finish", str(system.root), "denied", "--push", "--remote", "denied")
    assert refused.exit_code != 0
    out = _flat(refused)
    assert "bad.test" in out and "deny by sandbox.denied_domains entry 'bad.test'" in out, out
    assert git(system.root, "rev-parse", "main") == before  # refused before the merge
    assert git(system.root, "branch", "--show-current") == "feat/denied"


async def test_a_repository_that_rewrites_the_push_url_is_refused_naming_the_key(system: System) -> None:
    system.settings("auto")
    await system.finished_loop("steer")
    before = git(system.root, "rev-parse", "main")
    git(system.root, "remote", "add", "steer", system.server.url("git.test", "steer.git"))
    # the project would send the push (and a header scoped by URL) to another host
    other, ours = system.server.url("other.test", ""), system.server.url("git.test", "")
    git(system.root, "config", f"url.{other}.pushInsteadOf", ours)

    refused = await system.cli("prd", "finish", str(system.root), "steer", "--push", "--remote", "steer")
    assert refused.exit_code != 0
    out = _flat(refused)
    assert "url.http://other.test" in out and "pushinsteadof" in out and "git.test" in out, out
    assert git(system.root, "rev-parse", "main") == before
    git(system.root, "config", "--remove-section", f"url.{other}")


async def test_a_pass_of_the_push_reaches_its_remote_and_no_other_host(system: System) -> None:
    if shutil.which("curl") is None:
        pytest.skip("curl is not installed")
    port = system.server.port
    config = Config(nats_url=system.env["NATS_URL"], jido_home=system.home, instance="test")
    network = PushNetwork(login_proxy(system.bus, config), system.home, os.environ)
    remote = NetworkRemote(
        url=system.server.url("git.test", "x.git"), scheme="http", host="git.test", port=port
    )
    scope = await network.scope("p1", "x", remote)
    try:
        async with network.egress(scope) as egress:
            codes = {
                target: await _curl(egress.url, f"http://{target}/info/refs")
                for target in (f"git.test:{port}", f"other.test:{port}", f"git.test:{port + 1}")
            }
    finally:
        await network.proxy.close()
    assert codes[f"git.test:{port}"].endswith("401")  # reached: the server asks for its token
    assert codes[f"other.test:{port}"].endswith("403")  # allowed by the user's entries, not this pass's
    assert codes[f"git.test:{port + 1}"].endswith("403")


async def _curl(proxy: str, url: str) -> str:
    env = {"PATH": "/usr/bin:/bin", "http_proxy": proxy}
    proc = await asyncio.create_subprocess_exec(
        "curl",
        "-sS",
        "-m",
        "30",
        "-o",
        "/dev/null",
        "-w",
        "%{http_code}",
        url,
        env=env,
        stdout=asyncio.subprocess.PIPE,
    )
    out, _ = await asyncio.wait_for(proc.communicate(), 60)
    return out.decode()
