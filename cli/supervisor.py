"""The processes `jidocode up` supervises: its services and the embedded nats-server.

Services: each is a child process (an isolated ``python -I -m
jidocode.services.<name>`` in ``/``: decision 0302) restarted with bounded
exponential backoff when it dies; its output lines come prefixed with its name.
Each one dies with ``up``: Linux sends it SIGKILL the moment ``up`` dies, even
by ``kill -9`` (``PR_SET_PDEATHSIG``, :func:`jidocode.shared.runner.die_with_parent`);
a service must survive a crash anyway, and a SIGKILL is gone at once, where a
drain could keep an orphan answering on the next ``up``'s server (issue 31).

Warm spares (decision 0341): for the services named in ``spares`` (by default the conversation
service, whose restart every in-flight turn waits for), ``up`` keeps a second process that has
already imported everything (litellm included) and waits on its stdin, started
:data:`SPARE_AFTER_S` seconds after the live one (its imports never slow a start). When the live
process dies, the spare is told ``go`` and serves within a fraction of a second: no interpreter
start, no imports on the crash's critical path. A new spare follows. A spare holds no connection,
port or lock until it is told to go; it dies with ``up`` like every child.

Live children: ``up`` keeps ``<data home>/up-children.json`` (pid, start time
and label of every child it runs, 0600). A new ``up`` refuses to start while a
process listed there still runs (:func:`survivors`, the same pid *and* start
time: a reused pid is not mistaken for it), naming its pid.

The embedded server: restarted with backoff (capped at :data:`NATS_BACKOFF_CAP`
seconds) on the same store and port when it exits, and also when its
``/healthz`` fails :data:`UNHEALTHY_CHECKS` checks in a row (one every
:data:`HEALTH_EVERY` seconds): a full disk leaves the process alive with a
stream that accepts nothing until a restart, so a pid alone says nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from pydantic import BaseModel, ConfigDict, ValidationError
from rich.console import Console
from rich.markup import escape

from jidocode.shared.natsserver import NatsServer, write_private
from jidocode.shared.runner import HOST_CWD, SPARE_ENV, die_with_parent, python_module_argv

__all__ = [
    "DEFAULT_SPARES",
    "HEALTH_EVERY",
    "NATS_BACKOFF_CAP",
    "SPARE_AFTER_S",
    "SPARE_ENV",
    "UNHEALTHY_CHECKS",
    "Backoff",
    "Child",
    "LiveChild",
    "LiveChildren",
    "absolute_paths",
    "children_file",
    "describe_survivors",
    "say",
    "spawn_service",
    "stop_children",
    "supervise_child",
    "supervise_nats",
    "survivors",
]

#: Seconds between two health checks of the embedded server.
HEALTH_EVERY: Final = 2.0
#: Failed health checks in a row after which the server is restarted.
UNHEALTHY_CHECKS: Final = 3
#: The longest pause before restarting the server: once a disk has room again, the next try
#: comes within this many seconds.
NATS_BACKOFF_CAP: Final = 10.0

#: Seconds a service runs before its warm spare is started: its start-up is over by then.
SPARE_AFTER_S: Final = 3.0
#: The services ``up`` keeps a warm spare of, unless ``--spares`` says otherwise.
DEFAULT_SPARES: Final = ("conversation",)

#: Variables naming a path: made absolute for the children, which run in ``/``.
_PATH_VARS = ("JIDO_CODE_HOME", "JIDO_DATA_HOME", "XDG_DATA_HOME", "NATS_CREDS")

_COLORS = {
    "engine": "cyan",
    "project": "green",
    "conversation": "magenta",
    "tool_runner": "yellow",
    "asset_loader": "blue",
    "prd": "bright_magenta",
    "gateway": "bright_white",
}
out = Console(highlight=False, soft_wrap=True)


def say(label: str, text: str, color: str = "white") -> None:
    out.print(f"[{color}]{label:>14}[/] | {escape(text)}")


@dataclass
class Backoff:
    """Restart delays: the first at once, then ``base`` doubling to ``cap``; reset after ``stable``
    seconds of good running. A process that dies once (a kill, an out-of-memory) is back as soon as
    it can start: its conversations and calls wait for nothing else. One that keeps dying backs off."""

    base: float = 0.5
    cap: float = 30.0
    stable: float = 60.0
    attempt: int = 0

    def next_delay(self, ran_for: float) -> float:
        if ran_for >= self.stable:
            self.attempt = 0
        delay: float = 0.0 if self.attempt == 0 else min(self.cap, self.base * 2.0 ** (self.attempt - 1))
        self.attempt += 1
        return delay


@dataclass
class Child:
    name: str
    replica: int = 0
    process: asyncio.subprocess.Process | None = None
    backoff: Backoff = field(default_factory=Backoff)
    restarts: int = 0
    #: Whether a warm spare is kept for this child (see the module's docstring).
    keep_spare: bool = False
    #: The warm spare, once started.
    spare: asyncio.subprocess.Process | None = None

    @property
    def label(self) -> str:
        return self.name if self.replica == 0 else f"{self.name}#{self.replica}"


# -- the live children's file ---------------------------------------------------


class LiveChild(BaseModel):
    """One process ``up`` started: its pid, its start time (clock ticks after boot) and label."""

    model_config = ConfigDict(frozen=True)

    pid: int
    started: int
    label: str


class _LiveFile(BaseModel):
    model_config = ConfigDict(frozen=True)

    supervisor: int
    children: list[LiveChild]


def children_file(data_home: Path) -> Path:
    """``<data home>/up-children.json``: the processes the ``up`` of that data home runs."""
    return data_home / "up-children.json"


def start_time(pid: int) -> int | None:
    """When ``pid`` started (field 22 of ``/proc/<pid>/stat``); ``None`` when it is gone, a
    zombie, or there is no ``/proc``."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    if fields[0] in ("Z", "X"):
        return None
    return int(fields[19])


class LiveChildren:
    """The children this ``up`` runs, kept in :func:`children_file` as they start and end."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._live: dict[int, LiveChild] = {}

    def add(self, label: str, pid: int) -> None:
        started = start_time(pid)
        if started is not None:
            self._live[pid] = LiveChild(pid=pid, started=started, label=label)
            self._write()

    def remove(self, pid: int) -> None:
        if self._live.pop(pid, None) is not None:
            self._write()

    def _write(self) -> None:
        doc = _LiveFile(supervisor=os.getpid(), children=list(self._live.values()))
        with contextlib.suppress(OSError):  # a full disk must not stop supervision
            write_private(self.path, doc.model_dump_json() + "\n")


def survivors(path: Path) -> list[LiveChild]:
    """The processes listed in ``path`` that still run (same pid, same start time); none when the
    file is missing or unreadable."""
    try:
        listed = _LiveFile.model_validate_json(path.read_bytes()).children
    except (OSError, ValidationError):
        return []
    return [c for c in listed if start_time(c.pid) == c.started]


# -- services -------------------------------------------------------------------


def absolute_paths(env: dict[str, str], cwd: str) -> dict[str, str]:
    """``env`` with its path variables (:data:`_PATH_VARS`) made absolute against ``cwd`` (pure):
    a service runs in :data:`HOST_CWD`, not in the directory ``up`` was started from."""
    made = dict(env)
    for name in _PATH_VARS:
        value = made.get(name)
        if value and not os.path.isabs(os.path.expanduser(value)):
            made[name] = os.path.normpath(os.path.join(cwd, value))
    return made


async def spawn_service(
    child: Child, env: dict[str, str], *, spare: bool = False
) -> asyncio.subprocess.Process:
    """Start ``child``'s service process: isolated Python (``-I``) in :data:`HOST_CWD`, so no
    project ``up`` was started from can shadow the package (docs/decisions/0302); it gets SIGKILL
    when this process dies (Linux). A ``spare`` waits for ``go`` on its stdin (a pipe) to serve."""
    extra = {SPARE_ENV: "1"} if spare else {}
    return await asyncio.create_subprocess_exec(
        *python_module_argv(f"jidocode.services.{child.name}"),
        cwd=HOST_CWD,
        env={
            **absolute_paths(env, os.getcwd()),
            "JIDO_INSTANCE": f"{child.label}-{os.getpid()}",
            "JIDO_LOG_FORMAT": env.get("JIDO_LOG_FORMAT", "text"),
            **extra,
        },
        stdin=asyncio.subprocess.PIPE if spare else None,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        start_new_session=True,  # Ctrl-C reaches the supervisor only; it stops children in order
        preexec_fn=die_with_parent(signal.SIGKILL),
    )


async def _pump(child: Child, stream: asyncio.StreamReader) -> None:
    color = _COLORS.get(child.name, "white")
    while line := await stream.readline():
        say(child.label, line.decode(errors="replace").rstrip(), color)


@dataclass
class _Running:
    """A child process and the task copying its output."""

    process: asyncio.subprocess.Process
    pump: asyncio.Task[None]


async def _start(child: Child, env: dict[str, str], *, spare: bool = False) -> _Running:
    process = await spawn_service(child, env, spare=spare)
    assert process.stdout is not None
    return _Running(process, asyncio.create_task(_pump(child, process.stdout)))


async def _spare_later(child: Child, env: dict[str, str], live: LiveChildren | None) -> _Running:
    """A warm spare for ``child``, started :data:`SPARE_AFTER_S` seconds from now."""
    await asyncio.sleep(SPARE_AFTER_S)  # the live process's start-up first
    spare = await _start(child, env, spare=True)
    child.spare = spare.process
    if live is not None:
        live.add(f"{child.label} (spare)", spare.process.pid)
    return spare


async def _promote(spare: _Running | None) -> _Running | None:
    """``spare`` told to serve; ``None`` when there is none or it is gone."""
    if spare is None or spare.process.returncode is not None or spare.process.stdin is None:
        return None
    try:
        spare.process.stdin.write(b"go\n")
        await spare.process.stdin.drain()
        spare.process.stdin.close()
    except (BrokenPipeError, ConnectionResetError):
        return None
    return spare


async def _take_spare(keeper: asyncio.Task[_Running] | None) -> _Running | None:
    """The spare ``keeper`` started, or ``None`` (cancelled when it has not started one yet)."""
    if keeper is None:
        return None
    if not keeper.done():
        keeper.cancel()
    results = await asyncio.gather(keeper, return_exceptions=True)
    return results[0] if isinstance(results[0], _Running) else None


async def supervise_child(
    child: Child, env: dict[str, str], stopping: asyncio.Event, live: LiveChildren | None = None
) -> None:
    """Run ``child`` until ``stopping``, restarting it (from its warm spare when it keeps one)
    with backoff; ``live`` lists it meanwhile."""
    spare: _Running | None = None
    keeper: asyncio.Task[_Running] | None = None
    try:
        while not stopping.is_set():
            started = time.monotonic()
            promoted = await _promote(spare)
            running = promoted or await _start(child, env)
            spare, child.spare = None, None
            child.process = running.process
            if live is not None:
                live.remove(running.process.pid)  # listed as the spare until now
                live.add(child.label, running.process.pid)
            if child.keep_spare:
                keeper = asyncio.create_task(_spare_later(child, env, live))
            code = await running.process.wait()
            await running.pump
            spare, keeper = await _take_spare(keeper), None
            if live is not None:
                live.remove(running.process.pid)
            if stopping.is_set():
                return
            delay = child.backoff.next_delay(time.monotonic() - started)
            child.restarts += 1
            how = " from its warm spare" if spare is not None and spare.process.returncode is None else ""
            say(
                "up",
                f"{child.label} exited with code {code}; restart #{child.restarts}{how} in {delay:.1f} s",
                "red",
            )
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stopping.wait(), delay)
    finally:
        spare = spare or await _take_spare(keeper)
        if spare is not None and spare.process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                spare.process.kill()  # it waits for `go`: nothing to drain
            await spare.process.wait()
            if live is not None:
                live.remove(spare.process.pid)


async def stop_children(children: list[Child], grace: float) -> None:
    """SIGTERM every live child, wait up to ``grace`` seconds, SIGKILL what is left (a warm spare
    is killed at once: it holds nothing)."""
    for c in children:
        if c.spare is not None and c.spare.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                c.spare.kill()
    live = [c for c in children if c.process and c.process.returncode is None]
    for c in live:
        with contextlib.suppress(ProcessLookupError):
            assert c.process is not None
            c.process.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + grace
    for c in live:
        assert c.process is not None
        try:
            await asyncio.wait_for(c.process.wait(), max(0.1, deadline - time.monotonic()))
        except TimeoutError:
            say("up", f"{c.label} did not drain in {grace:g} s: killing it", "red")
            with contextlib.suppress(ProcessLookupError):
                os.killpg(c.process.pid, signal.SIGKILL)
            await c.process.wait()


# -- the embedded server --------------------------------------------------------


async def _wait_stopping(stopping: asyncio.Event, seconds: float) -> bool:
    """Whether ``stopping`` is set within ``seconds``."""
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stopping.wait(), seconds)
    return stopping.is_set()


async def _until_unwell(server: NatsServer, stopping: asyncio.Event) -> str | None:
    """Wait until the server exits, or fails :data:`UNHEALTHY_CHECKS` health checks in a row (then
    stop it); why, or ``None`` once ``stopping`` is set."""
    process = server.process
    if process is None:
        return None
    exited = asyncio.create_task(asyncio.to_thread(process.wait))
    failures: list[str] = []
    try:
        while not stopping.is_set():
            done, _ = await asyncio.wait({exited}, timeout=HEALTH_EVERY)
            if stopping.is_set():
                return None
            if done:
                return f"nats-server exited with code {exited.result()}"
            if server.monitor_port is None:
                continue
            problem = await asyncio.to_thread(server.health, HEALTH_EVERY)
            failures = [*failures, problem] if problem is not None else []
            if len(failures) >= UNHEALTHY_CHECKS:
                await asyncio.to_thread(server.stop)
                return f"nats-server unhealthy ({failures[-1]}): stopped it"
        return None
    finally:
        if not exited.done():
            exited.cancel()  # the thread ends with the process; nobody waits for it


async def _start_again(
    server: NatsServer, stopping: asyncio.Event, delay: float, next_delay: Callable[[], float]
) -> bool:
    """Start the server again after ``delay``, retrying with ``next_delay``; ``False`` once
    ``stopping`` is set."""
    while not await _wait_stopping(stopping, delay):
        try:
            await asyncio.to_thread(server.start)
        except (RuntimeError, OSError) as exc:  # OSError: its config cannot be written (a full disk)
            delay = next_delay()
            say("up", f"nats-server did not start again ({exc}); next try in {delay:.1f} s", "red")
            continue
        say("up", f"NATS listening again on {server.url} (same store)", "bold")
        return True
    return False


async def supervise_nats(server: NatsServer, stopping: asyncio.Event) -> None:
    """Restart the embedded nats-server when it dies or stays unhealthy, on the same store and
    port, with backoff.

    The services ride out the gap (they reconnect by themselves) and, JetStream
    being synced on every write, find their journals as they were.
    """
    backoff = Backoff(cap=NATS_BACKOFF_CAP)
    restarts = 0
    while not stopping.is_set():
        started = time.monotonic()
        why = await _until_unwell(server, stopping)
        if why is None:
            return
        restarts += 1
        delay = backoff.next_delay(time.monotonic() - started)
        say("up", f"{why}; restart #{restarts} in {delay:.1f} s", "red")
        if not await _start_again(server, stopping, delay, lambda: backoff.next_delay(0.0)):
            return


def describe_survivors(found: list[LiveChild], data_home: Path) -> str:
    """The refusal of a new ``up`` while ``found`` (children of an earlier one) still run (pure)."""
    named = ", ".join(f"{c.label} (pid {c.pid})" for c in found)
    pids = " ".join(str(c.pid) for c in found)
    return (
        f"a service an earlier jidocode up started on this data home ({data_home}) still runs: {named}. "
        f"It would join this system's NATS; stop it first (`kill {pids}`), then start again."
    )
