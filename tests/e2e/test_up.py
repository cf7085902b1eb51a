"""`jidocode up` as a user runs it: embedded NATS, five services, supervision, clean stop."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import socket
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import httpx
import nats
import pytest

from jidocode.cli.dev.scripted_llm import Reply, ScriptedLlm
from jidocode.cli.supervisor import children_file, survivors
from jidocode.services.registry import SERVICES
from jidocode.shared import subjects
from jidocode.shared.bus import connect_nats
from jidocode.shared.config import (
    CLIENT_USER,
    Config,
    RunningSystem,
    read_credentials,
    running_file,
    running_system,
    same_server,
)
from jidocode.shared.natsserver import NatsServer, free_port, pid_alive, stop_orphan
from tests.helpers import ping_services, wait_for_services

pytestmark = pytest.mark.slow


class UpProcess:
    def __init__(self, tmp: Path, port: int | None = None, extra_env: dict[str, str] | None = None) -> None:
        env = {k: v for k, v in os.environ.items() if k != "NATS_URL"}
        env.update(extra_env or {})
        # no warm spare unless a test asks for one (`up`'s default keeps the conversation service's):
        # its imports are seconds of CPU each `up` of the suite would pay for nothing
        env.setdefault("JIDO_UP_SPARES", "none")
        self.data_home = str(tmp / "data")
        env.update(
            {
                "JIDO_DATA_HOME": self.data_home,
                "JIDO_CODE_HOME": str(tmp / "home"),
                "PYTHONUNBUFFERED": "1",
            }
        )
        self.port = port or free_port()
        self.gateway_port = free_port()
        env["JIDO_GATEWAY_PORT"] = str(self.gateway_port)  # never the shared 8765 of a parallel run
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "jidocode.cli.main", "up", "--port", str(self.port), "--grace", "5"],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        self.lines: list[str] = []
        self._queue: asyncio.Queue[str] = asyncio.Queue()

    def client_config(self, url: str) -> Config:
        creds = read_credentials(CLIENT_USER, Path(self.data_home))
        assert creds is not None and same_server(url, creds.url)
        return Config(nats_url=url, nats_user=creds.user, nats_password=creds.password)

    async def start_reader(self) -> None:
        loop = asyncio.get_running_loop()

        def pump() -> None:
            assert self.proc.stdout is not None
            for line in self.proc.stdout:
                loop.call_soon_threadsafe(self._queue.put_nowait, line.rstrip())
            loop.call_soon_threadsafe(self._queue.put_nowait, "<eof>")

        loop.run_in_executor(None, pump)

    async def wait_line(self, pattern: str, timeout: float = 30) -> re.Match[str]:
        async def loop() -> re.Match[str]:
            while True:
                line = await self._queue.get()
                self.lines.append(line)
                if line == "<eof>":
                    raise AssertionError("jidocode up ended early:\n" + "\n".join(self.lines[-40:]))
                if m := re.search(pattern, line):
                    return m

        return await asyncio.wait_for(loop(), timeout)


async def test_up_runs_nats_and_five_services_supervises_and_stops_cleanly(tmp_path: Path) -> None:
    up = UpProcess(tmp_path, extra_env={"JIDO_UP_SPARES": "conversation"})  # up's default
    await up.start_reader()
    try:
        m = await up.wait_line(r"NATS listening on (nats://\S+)")
        url = m.group(1)
        assert url.endswith(f":{up.port}")
        # the embedded server runs NATS users; the client's credentials are in the data home
        client = up.client_config(url)
        found = await wait_for_services(client, SERVICES, timeout=60)
        assert {subjects.SERVICE_NAMES[n] for n in SERVICES} <= set(found)
        pids = {name: int(infos[0]["metadata"]["pid"]) for name, infos in found.items()}
        # the CLI over the running system: status, projects start/list
        status = json.loads(await _cli(up, "status", "--json"))
        assert {s["name"] for s in status} >= {subjects.SERVICE_NAMES[n] for n in SERVICES}
        engine = next(s for s in status if s["name"] == subjects.SERVICE_NAMES["engine"])
        assert {e["name"] for e in engine["endpoints"]} >= {"start_project", "stop_project", "list_projects"}
        project_dir = tmp_path / "proj"
        project_dir.mkdir()
        started = json.loads(await _cli(up, "projects", "start", str(project_dir), "--json"))
        listed = json.loads(await _cli(up, "projects", "list", "--json"))
        assert [p["project_id"] for p in listed] == [started["project_id"]]
        found = json.loads(await _cli(up, "projects", "whereis", started["project_id"], "--json"))
        assert set(found) == {"project", "hosts"}
        assert found["project"]["root_path"] == started["root_path"] and found["hosts"]

        # every service's log lines come prefixed with its name
        await up.wait_line(r"^\s*engine \| .*engine ready")

        # the gateway: up prints its login URL with the token kept in the data home
        console = r"open the console: (http://127\.0\.0\.1:(\d+)/login\?token=(\S+))"
        seen = [m for m in (re.search(console, line) for line in up.lines) if m]  # it may come before
        login = seen[0] if seen else await up.wait_line(console, 60)
        assert int(login.group(2)) == up.gateway_port
        token_file = Path(up.data_home) / "gateway" / "token"
        assert login.group(3) == token_file.read_text().strip() and token_file.stat().st_mode & 0o077 == 0
        async with httpx.AsyncClient(timeout=30, follow_redirects=False) as http:
            opened = await http.get(login.group(1))
            assert opened.status_code == 303 and "jidocode_token" in opened.headers["set-cookie"]
            base = f"http://127.0.0.1:{up.gateway_port}"
            assert (await http.get(f"{base}/api/projects")).status_code == 200  # the cookie from /login
            http.cookies.clear()
            assert (await http.get(f"{base}/api/projects")).status_code == 401
            headers = {"Authorization": f"Bearer {login.group(3)}"}
            projects = (await http.get(f"{base}/api/projects", headers=headers)).json()["projects"]
            assert [p["project_id"] for p in projects] == [started["project_id"]]

        # supervision: a service that dies is restarted, and the log says so
        victim = pids[subjects.SERVICE_NAMES["engine"]]
        os.kill(victim, signal.SIGKILL)
        await up.wait_line(r"engine exited with code -9; restart #1")

        async def engine_back() -> int:
            nc = await connect_nats(client, "tests", wait=False)
            try:
                while True:
                    infos = (await ping_services(nc)).get(subjects.SERVICE_NAMES["engine"], [])
                    new = [int(i["metadata"]["pid"]) for i in infos if int(i["metadata"]["pid"]) != victim]
                    if new:
                        return new[0]
            finally:
                await nc.close()

        pids[subjects.SERVICE_NAMES["engine"]] = await asyncio.wait_for(engine_back(), 30)

        # the conversation service has a warm spare: a kill is answered by it, not by a new start
        spare = await asyncio.wait_for(_spare_pid(Path(up.data_home), "conversation"), 60)
        os.kill(pids[subjects.SERVICE_NAMES["conversation"]], signal.SIGKILL)
        await up.wait_line(r"conversation exited with code -9; restart #1 from its warm spare in 0\.0 s")

        async def served_by_the_spare() -> None:
            nc = await connect_nats(client, "tests", wait=False)
            try:
                while await _pids_of(nc, "conversation") != [spare]:  # each ping waits for answers
                    pass
            finally:
                await nc.close()

        await asyncio.wait_for(served_by_the_spare(), 30)
        pids[subjects.SERVICE_NAMES["conversation"]] = spare
        pids["the next spare"] = await asyncio.wait_for(_spare_pid(Path(up.data_home), "conversation"), 60)

        # Ctrl-C: everything drains and stops, no orphan
        up.proc.send_signal(signal.SIGINT)
        await up.wait_line(r"all stopped", timeout=40)
        assert await asyncio.to_thread(up.proc.wait, 20) == 0
        for name, pid in pids.items():
            assert not pid_alive(pid), f"{name} (pid {pid}) outlived jidocode up"
        with pytest.raises((OSError, nats.errors.NoServersError)):
            await nats.connect(url, max_reconnect_attempts=1, allow_reconnect=False, connect_timeout=1)
        with pytest.raises(httpx.ConnectError):  # the gateway stopped with the rest
            await httpx.AsyncClient().get(f"http://127.0.0.1:{up.gateway_port}/healthz")
    finally:
        if up.proc.poll() is None:
            up.proc.kill()


async def _spare_pid(data_home: Path, label: str) -> int:
    """The pid of ``label``'s warm spare, once ``up`` lists one in its live children's file."""
    while True:
        found = [c.pid for c in survivors(children_file(data_home)) if c.label == f"{label} (spare)"]
        if found:
            return found[0]
        await asyncio.sleep(0.2)  # the file has no change notification; the caller bounds the wait


async def _pids_of(nc: nats.aio.client.Client, name: str) -> list[int]:
    infos = (await ping_services(nc)).get(subjects.SERVICE_NAMES[name], [])
    return [int(i["metadata"]["pid"]) for i in infos]


async def _cli(up: UpProcess, *argv: str) -> str:
    """The CLI as another terminal runs it: no NATS_* variable, the client credentials found in the data home."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("NATS_")}
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "jidocode.cli.main",
        *argv,
        env={**env, "JIDO_DATA_HOME": up.data_home},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 0, (argv, out, err)
    return out.decode()


async def test_cli_says_how_to_start_when_nothing_runs(tmp_path: Path) -> None:
    env = {**os.environ, "NATS_URL": f"nats://127.0.0.1:{free_port()}"}
    for argv in (["projects", "list"], ["status"]):
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "jidocode.cli.main",
            *argv,
            env=env,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        out, err = await asyncio.wait_for(proc.communicate(), 30)
        assert proc.returncode != 0
        assert "jidocode up" in (out + err).decode(), (argv, out, err)


async def _run_cli(data_home: str, *argv: str, timeout: float = 60) -> tuple[int, str]:
    """``jidocode <argv>`` with no NATS_* variable on ``data_home``: its exit code and output."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("NATS_")}
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "jidocode.cli.main",
        *argv,
        env={**env, "JIDO_DATA_HOME": data_home, "PYTHONUNBUFFERED": "1"},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    out, _ = await asyncio.wait_for(proc.communicate(), timeout)
    assert proc.returncode is not None
    return proc.returncode, " ".join(out.decode().split())  # rich wraps lines: compare as words


async def test_second_up_on_the_same_data_home_refuses_naming_the_first(tmp_path: Path) -> None:
    # a file left by an `up` that died is ignored
    dead = await asyncio.create_subprocess_exec(sys.executable, "-c", "pass")
    await dead.wait()
    (tmp_path / "data").mkdir()
    running_file(tmp_path / "data").write_text(
        RunningSystem(pid=dead.pid, url="nats://127.0.0.1:1").model_dump_json()
    )
    up = UpProcess(tmp_path)
    await up.start_reader()
    try:
        url = (await up.wait_line(r"NATS listening on (nats://\S+)")).group(1)
        # progress: a line per service as it answers $SRV.PING, then all of them
        ready = set()
        while len(ready) < len(SERVICES):
            m = await up.wait_line(r"(\w+) ready in [\d.]+ s|all \d+ services ready", timeout=60)
            assert m.group(1), f"'all ready' before every service was: {ready}"
            ready.add(m.group(1))
        assert ready == set(SERVICES)
        await up.wait_line(rf"all {len(SERVICES)} services ready in [\d.]+ s")
        found = running_system(Path(up.data_home))
        assert found is not None and (found.pid, found.url) == (up.proc.pid, url)  # and its gateway's URL

        # a second `up` on the same data home (another port): refused, naming the first
        code, said = await _run_cli(up.data_home, "up", "--port", str(free_port()))
        assert code != 0
        assert f"pid {up.proc.pid}" in said and url in said, said
        assert "NATS listening" not in said

        # the first keeps working, and a command finds it without NATS_URL
        code, out = await _run_cli(up.data_home, "status", "--json", "--wait", "5")  # holds under load
        assert code == 0, out
        assert {s["name"] for s in json.loads(out)} >= {subjects.SERVICE_NAMES[n] for n in SERVICES}

        up.proc.send_signal(signal.SIGINT)
        await up.wait_line(r"all stopped", timeout=40)
        assert await asyncio.to_thread(up.proc.wait, 20) == 0
        assert running_system(Path(up.data_home)) is None
    finally:
        if up.proc.poll() is None:
            up.proc.kill()

    # right after the stop (its sockets in TIME-WAIT), the same --port is honoured, not moved
    again = UpProcess(tmp_path, port=up.port)
    await again.start_reader()
    try:
        m = await again.wait_line(r"NATS listening on (nats://\S+)|port \d+ is busy")
        assert m.group(1) == url, again.lines
        again.proc.send_signal(signal.SIGINT)
        await again.wait_line(r"all stopped", timeout=40)
    finally:
        if again.proc.poll() is None:
            again.proc.kill()


async def test_an_explicit_busy_port_is_refused_not_moved(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        code, said = await _run_cli(str(tmp_path / "data"), "up", "--port", str(port))
    assert code == 1
    assert f"port {port} is busy" in said and "NATS listening" not in said, said
    assert running_system(tmp_path / "data") is None


async def test_watch_exits_when_nats_cannot_be_reached(tmp_path: Path) -> None:
    # nothing runs: a clear message and a non-zero exit, no retrying
    code, said = await _run_cli(str(tmp_path / "empty"), "watch", timeout=30)
    assert code != 0
    assert "cannot reach NATS" in said and "jidocode up" in said, said

    # connected, then NATS goes away for good: watch says so and exits instead of retrying forever
    server = await asyncio.to_thread(NatsServer(store_dir=tmp_path / "nats", sync="default").start)
    env = {k: v for k, v in os.environ.items() if not k.startswith("NATS_")}
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "jidocode.cli.main",
        "watch",
        env={**env, "NATS_URL": server.url, "JIDO_DATA_HOME": str(tmp_path / "empty")},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        assert proc.stderr is not None
        first = await asyncio.wait_for(proc.stderr.readline(), 30)
        assert b"watching" in first, first
        await asyncio.to_thread(server.stop)
        _, err = await asyncio.wait_for(proc.communicate(), 90)
        assert proc.returncode == 1
        assert "lost the connection to NATS" in " ".join(err.decode().split()), err
    finally:
        server.stop()
        if proc.returncode is None:
            proc.kill()


def _running(pid: int) -> bool:
    """Alive and not a zombie (an orphan's exit may wait for a reaper that is slow to come)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return pid_alive(pid)
    return state not in ("Z", "X")


async def _until(predicate: Callable[[], bool], timeout: float) -> None:
    async def loop() -> None:
        # a process's state has no event to wait on: poll it, bounded by wait_for
        while not predicate():  # noqa: ASYNC110
            await asyncio.sleep(0.1)

    await asyncio.wait_for(loop(), timeout)


async def test_up_restarts_a_dead_nats_server_and_takes_it_down_when_killed(tmp_path: Path) -> None:
    up = UpProcess(tmp_path)
    await up.start_reader()
    try:
        url = (await up.wait_line(r"NATS listening on (nats://\S+)")).group(1)
        client = up.client_config(url)
        await wait_for_services(client, SERVICES, timeout=60)
        # the health check of each service finds its replica here (up's children), no --any needed
        for name in SERVICES:
            assert (await _cli(up, "probe", name, "--timeout", "10")).strip() == f"{name}: ok"
        project_dir = tmp_path / "proj"
        project_dir.mkdir()
        first = json.loads(await _cli(up, "projects", "start", str(project_dir), "--json"))

        # kill -9 of the embedded server: up restarts it on the same port and store
        pid_file = Path(up.data_home) / "nats" / "nats-server.pid"
        victim = int(pid_file.read_text())
        os.kill(victim, signal.SIGKILL)
        await up.wait_line(r"nats-server exited with code -9; restart #1", timeout=30)
        await up.wait_line(rf"NATS listening again on {re.escape(url)}", timeout=60)
        await wait_for_services(client, SERVICES, timeout=60)
        assert (await _cli(up, "probe", "conversation", "--timeout", "10")).strip() == "conversation: ok"
        # the store survived: the registry still knows the project, and the same root gives the same id
        again = json.loads(await _cli(up, "projects", "start", str(project_dir), "--json"))
        assert again["project_id"] == first["project_id"]
        listed = json.loads(await _cli(up, "projects", "list", "--json"))
        assert [p["project_id"] for p in listed] == [first["project_id"]]

        # kill -9 of up itself: its nats-server does not outlive it (no server left on the store)
        server = int(pid_file.read_text())
        assert server != victim and _running(server)
        up.proc.kill()
        await asyncio.to_thread(up.proc.wait, 20)
        await _until(lambda: not _running(server), 30)
    finally:
        if up.proc.poll() is None:
            up.proc.kill()


async def test_a_server_left_on_the_store_is_stopped_before_another_starts(tmp_path: Path) -> None:
    store = tmp_path / "nats"
    pid_file = store / "nats-server.pid"
    left = await asyncio.to_thread(NatsServer(store_dir=store, sync="default", pid_file=pid_file).start)
    try:
        assert left.process is not None
        await _until(lambda: pid_file.exists() and pid_file.read_text().strip().isdigit(), 15)
        # a pid file naming another program is left alone
        other = tmp_path / "other.pid"
        other.write_text(str(os.getpid()))
        assert await asyncio.to_thread(stop_orphan, other) is None
        # the server's own is stopped
        assert await asyncio.to_thread(stop_orphan, pid_file) == left.process.pid
        await asyncio.to_thread(left.process.wait, 15)
        assert await asyncio.to_thread(stop_orphan, pid_file) is None  # nothing left to stop
    finally:
        left.stop()


async def test_up_with_an_unreachable_nats_url_says_so_and_exits(tmp_path: Path) -> None:
    env = {**os.environ, "NATS_URL": f"nats://127.0.0.1:{free_port()}", "JIDO_DATA_HOME": str(tmp_path / "d")}
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "jidocode.cli.main",
        "up",
        "--nats-wait",
        "2",
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    out, _ = await asyncio.wait_for(proc.communicate(), 60)
    said = " ".join(out.decode().split())
    assert proc.returncode == 1, said
    assert "waiting for NATS at" in said and "cannot reach NATS at" in said and "after 2 s" in said, said
    assert "starting engine" not in said  # no service was started against nothing


async def test_chat_says_when_up_dies_mid_turn_instead_of_hanging(tmp_path: Path) -> None:
    async with ScriptedLlm() as llm:
        llm.script(Reply.answer("too late", delay_s=300))  # the turn is in flight when up dies
        up = UpProcess(
            tmp_path, extra_env={"JIDO_LLM_MODEL": "openai/scripted", "JIDO_LLM_API_BASE": llm.api_base}
        )
        await up.start_reader()
        chat: asyncio.subprocess.Process | None = None
        try:
            url = (await up.wait_line(r"NATS listening on (nats://\S+)")).group(1)
            await wait_for_services(up.client_config(url), SERVICES, timeout=60)
            project_dir = tmp_path / "proj"
            project_dir.mkdir()
            env = {k: v for k, v in os.environ.items() if not k.startswith("NATS_")}
            chat = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "jidocode.cli.main",
                "chat",
                str(project_dir),
                "hello",
                env={**env, "JIDO_DATA_HOME": up.data_home, "JIDO_CODE_HOME": str(tmp_path / "home")},
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
            )
            await llm.wait_requests(1, timeout=60)
            up.proc.kill()  # its nats-server and services go with it
            await asyncio.to_thread(up.proc.wait, 20)
            out, err = await asyncio.wait_for(chat.communicate(), 90)
            said = " ".join((out + err).decode().split())
            assert chat.returncode == 1, said
            assert "lost the connection to NATS" in said and "jidocode up" in said, said
        finally:
            if chat is not None and chat.returncode is None:
                chat.kill()
            if up.proc.poll() is None:
                up.proc.kill()
