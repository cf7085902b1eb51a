"""`jidocode status` and `jidocode probe`: what nats.micro discovery finds on the bus (and
``status``: the web console's address, when this data home's ``jidocode up`` runs it)."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import time
from pathlib import Path
from typing import Any

import nats
import nats.errors
import typer
from nats.aio.client import Client
from rich import box
from rich.markup import escape
from rich.table import Table

from jidocode.services.registry import SERVICES
from jidocode.shared import subjects
from jidocode.shared.bus import connect_nats, gather, unreachable_message
from jidocode.shared.config import Config, running_system, same_server
from jidocode.shared.errors import ServiceUnavailable

from .common import console, print_json, run
from .console import find_console

__all__ = ["console_line", "discover", "is_local", "probe", "runs_here", "status", "status_table"]


async def _gather(nc: Client, subject: str, wait: float) -> list[dict[str, Any]]:
    return [json.loads(m.data) for m in await gather(nc, subject, wait=wait)]


async def discover(config: Config, wait: float = 0.5) -> list[dict[str, Any]]:
    """Every JidoCode service instance: its INFO (endpoints) merged with its STATS."""
    try:
        nc = await connect_nats(config, "status", wait=False)
    except (nats.errors.NoServersError, OSError) as exc:
        raise ServiceUnavailable(await unreachable_message(config.nats_url, exc)) from None
    try:
        infos = await _gather(nc, subjects.srv("INFO"), wait)
        stats = {s["id"]: s for s in await _gather(nc, subjects.srv("STATS"), wait)}
    finally:
        await nc.close()
    ours = set(subjects.SERVICE_NAMES.values())
    found = []
    for info in infos:
        if info.get("name") not in ours:
            continue
        stat = stats.get(info["id"], {})
        by_name = {e["name"]: e for e in stat.get("endpoints", [])}
        info["endpoints"] = [{**e, **by_name.get(e["name"], {})} for e in info.get("endpoints", [])]
        info["started"] = stat.get("started")
        found.append(info)
    return sorted(found, key=lambda i: (i["name"], i["id"]))


def _short(text: str, prefix: str) -> str:
    return text[len(prefix) :] if text.startswith(prefix) else text


def status_table(found: list[dict[str, Any]]) -> Table:
    """One row per endpoint, readable at 80 columns (subjects, versions, ids: ``--json``).

    No errors column: every failure is answered with an ``error`` event by the
    service middleware, which nats.micro does not count, so its ``num_errors`` is
    always 0.
    """
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False)
    table.add_column("service", no_wrap=True)
    table.add_column("instance", overflow="fold")
    table.add_column("endpoint", overflow="fold")
    table.add_column("requests", justify="right", no_wrap=True)
    table.add_column("avg", justify="right", no_wrap=True)
    for info in found:
        name = str(info["name"])
        instance = str((info.get("metadata") or {}).get("instance", info["id"]))
        service = _short(name, "jidocode-")
        for i, ep in enumerate(info["endpoints"]):
            avg_ns = ep.get("average_processing_time") or 0
            table.add_row(
                service if i == 0 else "",
                _short(instance, f"{service.replace('-', '_')}/") if i == 0 else "",
                ep["name"],
                str(ep.get("num_requests", 0)),
                f"{avg_ns / 1e6:.2f} ms",
            )
    return table


def status(
    json_out: bool = typer.Option(False, "--json", help="print JSON"),
    wait: float = typer.Option(
        0.5,
        min=0.05,
        max=60.0,
        help="seconds without a new answer that end the search (raise on a busy system)",
    ),
) -> None:
    """List the services found via $SRV.PING/INFO/STATS, with their endpoints and stats."""
    config = Config.from_env()
    found = run(lambda: discover(config, wait))
    if json_out:
        print_json(found)
        return
    if not found:
        console.print(
            f"no JidoCode service answers on {config.nats_url}: start the system with `jidocode up`"
        )
        raise typer.Exit(1)
    console.print(status_table(found))
    missing = sorted(
        set(SERVICES) - {k for k, v in subjects.SERVICE_NAMES.items() if v in {i["name"] for i in found}}
    )
    if missing:
        console.print(f"[yellow]not running:[/] {', '.join(missing)}")
    if (line := console_line(config)) is not None:
        console.print(line, highlight=False, soft_wrap=True)


def console_line(config: Config) -> str | None:
    """The web console's address (checked: :func:`.console.find_console`) as a status line, when
    the system ``config`` names is the ``jidocode up`` of this data home; else ``None``."""
    running = running_system()
    if running is None or not same_server(config.nats_url, running.url):
        return None
    checked, why = find_console()
    if checked is None:
        return f"[yellow]console:[/] {escape(why)}"
    if not checked.ours:
        return f"[yellow]console:[/] {escape(checked.problem())}"
    return f"console: {checked.base_url} (`jidocode console` prints the login URL, --open opens it)"


def runs_here(pid: object, instance: str, proc: Path = Path("/proc")) -> bool:
    """Whether process ``pid`` of this host (or container) is the replica named ``instance``.

    True when the process's environment sets ``JIDO_INSTANCE`` to that name: how
    ``jidocode up`` names its children (``<service>-<pid of up>``). A pid of another
    host that happens to exist here has another environment (or is not ours to read).
    """
    if not isinstance(pid, str | int) or not str(pid).isdigit():
        return False
    try:
        environ = (proc / str(pid) / "environ").read_bytes()
    except OSError:
        return False
    return f"JIDO_INSTANCE={instance}".encode() in environ.split(b"\0")


def is_local(
    ping: dict[str, Any], name: str, instance: str | None, hostname: str, proc: Path = Path("/proc")
) -> bool:
    """Whether a ``$SRV.PING`` answer comes from a replica of ``name`` in this container/host.

    With ``JIDO_INSTANCE`` set here, the replica of that name. Else a replica named
    ``<hostname>-<pid>`` (a service's default name; in a container the hostname is the
    container's own), or one whose process runs here under the name it reports (the
    children of ``jidocode up``, named ``<service>-<pid of up>``).
    """
    meta = ping.get("metadata") or {}
    source = str(meta.get("instance", ""))
    prefix = f"{name}/"
    if not source.startswith(prefix):
        return False
    own = source[len(prefix) :]
    if instance:
        return own == instance
    return own.startswith(f"{hostname}-") or runs_here(meta.get("pid"), own, proc)


def probe(
    name: str = typer.Argument(..., help=f"one of {', '.join(SERVICES)}"),
    timeout: float = typer.Option(2.0, help="seconds to wait for the answers"),
    any_replica: bool = typer.Option(
        False, "--any", help="healthy when any replica answers (default: a replica on this host/container)"
    ),
) -> None:
    """Exit 0 when service NAME answers $SRV.PING from this host (a health check for containers).

    By default the answer must come from a replica running here (the one named
    ``JIDO_INSTANCE`` when set, else one named after this hostname or whose process
    runs here, as ``jidocode up``'s children), so a hung replica is not reported
    healthy because another one answers.
    """
    if name not in SERVICES:
        raise typer.BadParameter(f"unknown service {name!r}: expected one of {', '.join(SERVICES)}")
    config = Config.from_env()
    instance = os.environ.get("JIDO_INSTANCE") or None
    hostname = socket.gethostname()

    async def main() -> str | None:
        """``None`` when healthy, else what went wrong."""
        deadline = time.monotonic() + timeout
        try:
            nc = await connect_nats(config, f"probe-{name}", wait=False)
        except (nats.errors.NoServersError, OSError) as exc:
            return await unreachable_message(config.nats_url, exc)
        try:
            # Wait the whole timeout for a matching answer: a busy replica (a turn on its loop,
            # a rebuild) may answer late, and an early answer from another replica must not end
            # the wait for ours.
            inbox = nc.new_inbox()
            sub = await nc.subscribe(inbox)
            await nc.publish(subjects.srv("PING", name), b"", reply=inbox)
            while (left := deadline - time.monotonic()) > 0:
                try:
                    msg = await sub.next_msg(timeout=left)
                except nats.errors.TimeoutError:
                    break
                with contextlib.suppress(ValueError):
                    ping = json.loads(msg.data) if msg.data else None
                    if isinstance(ping, dict) and (any_replica or is_local(ping, name, instance, hostname)):
                        return None
        finally:
            await nc.close()
        return f"no answer{'' if any_replica else ' from this host'} within {timeout:g} s"

    problem = run(main)
    if problem is not None:
        typer.echo(f"{name}: {problem}", err=True)
        raise typer.Exit(1)
    typer.echo(f"{name}: ok")
