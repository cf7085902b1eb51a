"""The processes `jidocode up` supervises: its services and the embedded nats-server.

Services: each is a child process (an isolated ``python -I -m
jidocode.services.<name>`` in ``/``: decision 0302) restarted with bounded
exponential backoff when it dies; its output lines come prefixed with its name.
Each one dies with ``up``: Linux sends it SIGKILL the moment ``up`` dies, even
by ``kill -9`` (``PR_SET_PDEATHSIG``, :func:`jidocode.shared.runner.die_with_parent`);
a service must survive a crash anyway, and a SIGKILL is gone at once, where a
drain could keep an orphan answering on the next ``up``'s server (issue 31).

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
from jidocode.shared.runner import HOST_CWD, die_with_parent, python_module_argv

__all__ = [
    "HEALTH_EVERY",
    "NATS_BACKOFF_CAP",
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
    """Restart delays: ``base`` doubling to ``cap``; reset after ``stable`` seconds of good running."""

    base: float = 0.5
    cap: float = 30.0
    stable: float = 60.0
    attempt: int = 0

    def next_delay(self, ran_for: float) -> float:
        if ran_for >= self.stable:
            self.attempt = 0
        delay: float = min(self.cap, self.base * 2.0**self.attempt)
        self.attempt += 1
        return delay


@dataclass
class Child:
    name: str
    replica: int = 0
    process: asyncio.subprocess.Process | None = None
    backoff: Backoff = field(default_factory=Backoff)
    restarts: int = 0

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


async def spawn_service(child: Child, env: dict[str, str]) -> asyncio.subprocess.Process:
    """Start ``child``'s service process: isolated Python (``-I``) in :data:`HOST_CWD`, so no
    project ``up`` was started from can shadow the package (docs/decisions/0302); it gets SIGKILL
    when this process dies (Linux)."""
    return await asyncio.create_subprocess_exec(
        *python_module_argv(f"jidocode.services.{child.name}"),
        cwd=HOST_CWD,
        env={
            **absolute_paths(env, os.getcwd()),
            "JIDO_INSTANCE": f"{child.label}-{os.getpid()}",
            "JIDO_LOG_FORMAT": env.get("JIDO_LOG_FORMAT", "text"),
        },
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        start_new_session=True,  # Ctrl-C reaches the supervisor only; it stops children in order
        preexec_fn=die_with_parent(signal.SIGKILL),
    )


async def _pump(child: Child, stream: asyncio.StreamReader) -> None:
    color = _COLORS.get(child.name, "white")
    while line := await stream.readline():
        say(child.label, line.decode(errors="replace").rstrip(), color)


async def supervise_child(
    child: Child, env: dict[str, str], stopping: asyncio.Event, live: LiveChildren | None = None
) -> None:
    """Run ``child`` until ``stopping``, restarting it with backoff; ``live`` lists it meanwhile."""
    while not stopping.is_set():
        started = time.monotonic()
        child.process = await spawn_service(child, env)
        if live is not None:
            live.add(child.label, child.process.pid)
        assert child.process.stdout is not None
        pump = asyncio.create_task(_pump(child, child.process.stdout))
        code = await child.process.wait()
        await pump
        if live is not None:
            live.remove(child.process.pid)
        if stopping.is_set():
            return
        delay = child.backoff.next_delay(time.monotonic() - started)
        child.restarts += 1
        say("up", f"{child.label} exited with code {code}; restart #{child.restarts} in {delay:.1f} s", "red")
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stopping.wait(), delay)


async def stop_children(children: list[Child], grace: float) -> None:
    """SIGTERM every live child, wait up to ``grace`` seconds, SIGKILL what is left."""
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
