"""Sandboxed programs reach the egress proxy, and nothing else of the network (issue 29, point 2).

Each case runs a real command under both sandboxes (a mode this machine cannot run is skipped
with the reason) through :func:`jidocode.shared.sandbox.prepare` with an
:class:`~jidocode.shared.sandbox.Egress`: a small recording proxy stands for the egress proxy
(it answers every request itself, so nothing leaves the machine), listening like the real one on
a unix socket and on a loopback TCP port. Judged by what the listeners saw, not by what the
command printed.
"""

from __future__ import annotations

import asyncio
import base64
import socket
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlparse

import pytest

from jidocode.services.tool_runner.executor import Limits, run_authorized
from jidocode.shared import sandbox
from jidocode.shared.egress import Pass
from jidocode.shared.errors import PermissionDenied
from jidocode.shared.natsserver import NatsServer
from jidocode.shared.policy import Decision, Effect, Policy
from jidocode.shared.sandbox import Capabilities, Egress
from jidocode.shared.sandbox._launcher import _assemble, parse_spec, spec_argv, udp_filter_program
from tests.security.sandbox_support import MODES, make_project, skip_unless, write_global

_ANSWER = b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\nConnection: close\r\n\r\nvia-proxy"


@dataclass
class Proxy:
    """The recording stand-in of the egress proxy: the first line of every request it got."""

    egress: Egress
    requests: list[bytes] = field(default_factory=list)
    #: The ``Proxy-Authorization`` header of each request (empty: none).
    auth: list[bytes] = field(default_factory=list)


@dataclass
class Box:
    mode: str
    root: Path
    jido_home: Path


@pytest.fixture(params=MODES)
def box(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Box:
    mode = request.param
    skip_unless(mode)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    (tmp_path / "home").mkdir()
    jido_home = tmp_path / "jido_home"
    write_global(jido_home, {"mode": mode})
    return Box(mode, make_project(tmp_path / "proj"), jido_home)


@pytest.fixture
async def proxy(tmp_path: Path) -> AsyncIterator[Proxy]:
    """A proxy on a unix socket and on 127.0.0.1 that records each request's first line and answers it."""
    seen = Proxy(Egress(socket=str(tmp_path / "egress.sock"), port=1))

    async def on(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        seen.requests.append((await reader.readline()).strip())
        auth = b""
        while (line := await reader.readline()).strip():
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"proxy-authorization":
                auth = value.strip()
        seen.auth.append(auth)
        if seen.requests[-1].startswith(b"CONNECT echo.test:"):
            writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
            while data := await reader.read(65536):  # the tunnel echoes what comes through it
                writer.write(data)
                await writer.drain()
        else:
            writer.write(_ANSWER)
            await writer.drain()
        writer.close()

    unix = await asyncio.start_unix_server(on, seen.egress.socket)
    tcp = await asyncio.start_server(on, "127.0.0.1", 0)
    seen.egress = Egress(socket=seen.egress.socket, port=tcp.sockets[0].getsockname()[1])
    yield seen
    for server in (unix, tcp):
        server.close()
        await server.wait_closed()


@pytest.fixture
async def listener() -> AsyncIterator[tuple[int, list[bytes]]]:
    """A TCP server on 127.0.0.1 (the gateway's stand-in) that records what connects to it."""
    seen: list[bytes] = []

    async def on(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        seen.append(await reader.read(100))
        writer.close()

    server = await asyncio.start_server(on, "127.0.0.1", 0)
    yield server.sockets[0].getsockname()[1], seen
    server.close()
    await server.wait_closed()


@pytest.fixture(scope="module")
def nats_port(tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    """The port of a real nats-server (the runtime's bus), on 127.0.0.1."""
    server = NatsServer(store_dir=tmp_path_factory.mktemp("js"), sync="default").start()
    try:
        port = urlparse(server.url).port
        assert port is not None
        yield port
    finally:
        server.stop()


async def run(box: Box, script: str, egress: Egress | None) -> str:
    """Run ``bash -c script`` in the box's project under its sandbox; its output (exit status 0 expected)."""
    launch = await sandbox.prepare(
        ["/bin/bash", "-c", script], root=str(box.root), jido_home=str(box.jido_home), egress=egress
    )
    try:
        result = await sandbox.run_command(
            launch.argv,
            cwd=launch.cwd,
            timeout_s=60.0,
            output_cap=1 << 16,
            env=launch.env,
            pass_fds=launch.pass_fds,
            graceful=launch.graceful_stop,
            info_fd=launch.info_fd,
        )
    finally:
        await launch.close()
    assert launch.mode == box.mode
    assert result["exit_code"] == 0, result
    return str(result["output"])


_URLLIB = "import urllib.request as u; print(u.urlopen('http://pypi.test/simple/').read().decode())"
_RAW_TCP = (
    "import socket, sys\n"
    "try:\n"
    "    socket.create_connection(('127.0.0.1', int(sys.argv[1])), timeout=10).sendall(b'raw')\n"
    "    print('CONNECTED')\n"
    "except OSError as exc:\n"
    "    print('REFUSED', exc)\n"
)
_UDP = (
    "import socket, sys\n"
    "try:\n"
    "    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
    "    s.sendto(b'udp', ('127.0.0.1', int(sys.argv[1])))\n"
    "    print('SENT')\n"
    "except OSError as exc:\n"
    "    print('REFUSED', exc)\n"
)


async def test_curl_and_urllib_reach_the_proxy_through_its_variables(box: Box, proxy: Proxy) -> None:
    out = await run(box, f'curl -sS http://registry.test/pkg; echo; python3 -c "{_URLLIB}"', proxy.egress)
    assert out.count("via-proxy") == 2, out
    assert proxy.requests == [
        b"GET http://registry.test/pkg HTTP/1.1",
        b"GET http://pypi.test/simple/ HTTP/1.1",
    ]


_TUNNEL = (
    "import hashlib, os, socket, urllib.parse\n"
    "proxy = urllib.parse.urlsplit(os.environ['HTTPS_PROXY'])\n"
    "s = socket.create_connection((proxy.hostname, proxy.port), timeout=30)\n"
    "s.sendall(b'CONNECT echo.test:443 HTTP/1.1\\r\\nHost: echo.test:443\\r\\n\\r\\n')\n"
    "head = b''\n"
    "while not head.endswith(b'\\r\\n\\r\\n'):\n"
    "    head += s.recv(1)\n"
    "data = os.urandom(1 << 20)\n"
    "s.sendall(data)\n"
    "s.shutdown(socket.SHUT_WR)\n"
    "back = b''\n"
    "while chunk := s.recv(65536):\n"
    "    back += chunk\n"
    "print(head.split(b' ')[1].decode(), back == data, len(back))\n"
)


async def test_a_tunnel_carries_a_mebibyte_both_ways(box: Box, proxy: Proxy) -> None:
    out = await run(box, f"python3 -c {_shell_quote(_TUNNEL)}", proxy.egress)
    assert out.split() == ["200", "True", str(1 << 20)], out


async def test_https_goes_through_connect(box: Box, proxy: Proxy) -> None:
    # the stand-in answers CONNECT with a page, not a tunnel: curl fails, the proxy saw the CONNECT
    await run(box, "curl -sS https://registry.test/ || true", proxy.egress)
    assert proxy.requests == [b"CONNECT registry.test:443 HTTP/1.1"]


async def test_a_program_ignoring_the_proxy_gets_no_network(
    box: Box, proxy: Proxy, listener: tuple[int, list[bytes]], nats_port: int
) -> None:
    port, seen = listener
    script = (
        f'python3 -c "$RAW" {port}; python3 -c "$RAW" {nats_port}; '
        f"curl -sS --noproxy '*' http://127.0.0.1:{port}/ || echo CURL-REFUSED"
    )
    out = await run(box, f"RAW={_shell_quote(_RAW_TCP)}; {script}", proxy.egress)
    assert "CONNECTED" not in out and out.count("REFUSED") == 3, out
    assert seen == [] and proxy.requests == []


@pytest.mark.parametrize("with_proxy", [True, False], ids=["proxied", "no-network"])
async def test_udp_is_refused(box: Box, proxy: Proxy, with_proxy: bool) -> None:
    receiver = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    receiver.bind(("127.0.0.1", 0))
    receiver.setblocking(False)
    try:
        port = receiver.getsockname()[1]
        out = await run(
            box,
            f"python3 -c {_shell_quote(_UDP)} {port}; echo x > /dev/udp/127.0.0.1/{port} || echo BASH-REFUSED",
            proxy.egress if with_proxy else None,
        )
        with pytest.raises(BlockingIOError):
            receiver.recvfrom(100)  # nothing came: the command has ended, its datagram would be here
    finally:
        receiver.close()
    if box.mode == "landlock":  # bubblewrap's datagrams stay in its own namespace
        assert "REFUSED" in out and "SENT" not in out and "BASH-REFUSED" in out, out


async def test_without_a_proxy_nothing_is_reached(box: Box, listener: tuple[int, list[bytes]]) -> None:
    port, seen = listener
    out = await run(
        box,
        f"python3 -c {_shell_quote(_RAW_TCP)} {port}; printenv HTTP_PROXY https_proxy || echo NO-PROXY",
        None,
    )
    assert "REFUSED" in out and "NO-PROXY" in out and "127.0.0.1" not in out, out
    assert seen == []


async def test_the_bash_tool_goes_out_through_its_pass(box: Box, proxy: Proxy) -> None:
    policy = Policy.build(str(box.root), jido_home=str(box.jido_home))
    issued = Pass(token="t0k3n", tcp_port=proxy.egress.port, unix_path=proxy.egress.socket)
    allow = Decision(effect=Effect.ALLOW, reason="the sandbox's network is judged")
    command = {"command": 'curl -sS http://registry.test/pkg; python3 -c "$PY"'.replace("$PY", _URLLIB)}
    result = await run_authorized(policy, "bash", command, allow, Limits(timeout_s=60.0), egress=issued)
    assert result.ok and str(result.data["output"]).count("via-proxy") == 2, result
    assert proxy.requests == [
        b"GET http://registry.test/pkg HTTP/1.1",
        b"GET http://pypi.test/simple/ HTTP/1.1",
    ]
    token = b"Basic " + base64.b64encode(b"jido:t0k3n")
    assert proxy.auth == [token, token]  # the pass's token rides along, from curl and from Python


def _shell_quote(text: str) -> str:
    return "'" + text.replace("'", "'\\''") + "'"


# --- the plan, without running anything --------------------------------------------------


def _landlock_caps(abi: int) -> Capabilities:
    return Capabilities(bwrap=None, bwrap_problem="not installed", landlock_abi=abi)


async def test_landlock_without_network_rules_refuses_the_proxy(tmp_path: Path) -> None:
    jido_home = tmp_path / "jh"
    write_global(jido_home, {"mode": "landlock"})
    root = make_project(tmp_path / "proj")
    with pytest.raises(PermissionDenied) as info:
        await sandbox.prepare(
            ["/bin/true"],
            root=str(root),
            jido_home=str(jido_home),
            caps=_landlock_caps(3),
            egress=Egress(socket=str(tmp_path / "p.sock"), port=3128),
        )
    assert info.value.details["sandbox"] == "egress_unconfinable"
    assert "ABI >= 4" in info.value.message


async def test_the_plans_carry_the_proxy(tmp_path: Path) -> None:
    jido_home = tmp_path / "jh"
    root = make_project(tmp_path / "proj")
    egress = Egress(socket=str(tmp_path / "p.sock"), port=3128)
    write_global(jido_home, {"mode": "landlock"})
    launch = await sandbox.prepare(
        ["/bin/true"], root=str(root), jido_home=str(jido_home), caps=_landlock_caps(4), egress=egress
    )
    await launch.close()
    sep = launch.argv.index("--")
    assert launch.argv[sep - launch.argv[:sep][::-1].index(sandbox.LAUNCHER) + 1] == "tcp:3128"
    assert launch.env["HTTPS_PROXY"] == launch.env["all_proxy"] == "http://127.0.0.1:3128"
    caps = sandbox.detect()
    if not caps.bwrap:
        return
    write_global(jido_home, {"mode": "bubblewrap"})
    launch = await sandbox.prepare(["/bin/true"], root=str(root), jido_home=str(jido_home), egress=egress)
    await launch.close()
    assert "--share-net" not in launch.argv and "--unshare-all" in launch.argv
    i = launch.argv.index(str(tmp_path / "p.sock"))
    assert launch.argv[i - 1 : i + 2] == ["--ro-bind", str(tmp_path / "p.sock"), "/run/jidocode-egress.sock"]


async def test_the_full_network_of_the_global_settings_wins(tmp_path: Path) -> None:
    write_global(tmp_path / "jh", {"mode": "landlock", "network": True})
    root = make_project(tmp_path / "proj")
    launch = await sandbox.prepare(
        ["/bin/true"],
        root=str(root),
        jido_home=str(tmp_path / "jh"),
        caps=_landlock_caps(4),
        egress=Egress(socket=str(tmp_path / "p.sock"), port=3128),
    )
    await launch.close()
    assert "1" in launch.argv[: launch.argv.index("--")] and "tcp:3128" not in launch.argv
    assert "HTTP_PROXY" not in launch.env


def test_egress_refuses_a_relative_socket_and_a_bad_port() -> None:
    with pytest.raises(ValueError, match="absolute"):
        Egress(socket="p.sock", port=3128)
    with pytest.raises(ValueError, match="1-65535"):
        Egress(socket="/p.sock", port=0)


def test_the_launcher_spec_carries_the_proxy_port() -> None:
    spec = {"abi": 4, "network": False, "connect_port": 3128, "parent": 1, "read": ["/usr"]}
    parsed, program = parse_spec([*spec_argv(spec), "--", "/bin/true"])
    assert parsed["connect_port"] == 3128 and parsed["network"] is False and program == ["/bin/true"]
    assert parse_spec([*spec_argv({"abi": 4}), "--", "/bin/true"])[0].get("connect_port") is None
    with pytest.raises(ValueError, match="network"):
        parse_spec(["4", "tcp", "1", "--", "/bin/true"])


@pytest.mark.parametrize("machine", ["x86_64", "aarch64"])
def test_the_udp_filter_assembles_for_each_known_machine(machine: str) -> None:
    program = udp_filter_program(machine)
    assert program is not None
    assembled = _assemble(program)
    assert len(assembled) == len(program)
    assert assembled[-1].k == 0x00050001  # the last instruction refuses with EPERM
    assert udp_filter_program("riscv64") is None
