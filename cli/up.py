"""`jidocode up`: embedded NATS (when no ``NATS_URL``) and every service, supervised.

This is seed 000's supervision tree as processes (:mod:`.supervisor`): each
service is a child process (an isolated ``python -I -m jidocode.services.<name>``
in ``/``, never in the directory ``up`` was started from, which may be a
project: decision 0302) restarted with bounded exponential backoff when it dies
(and the restart is logged); each output line is prefixed with the service's
name; Ctrl-C (or SIGTERM) asks every service to drain, waits, kills what is
left, then stops NATS. Children die with this process, even when it is killed
with ``kill -9`` (Linux sends them SIGKILL), so no orphan survives the
supervisor; and while a child an earlier ``up`` started on the data home still
runs, a new ``up`` refuses to start, naming its pid (decision 0323).

The embedded server always runs with NATS users (decision 0140): one per
service and a ``client`` user, with the permissions ``jidocode deploy`` gives
them (:mod:`jidocode.shared.nats_permissions`). The passwords live in
``<data home>/credentials/<user>.json`` (0700 folder, 0600 files); each service
gets its own user through its environment (``NATS_USER``, ``NATS_PASSWORD``,
``NATS_INBOX_PREFIX``), and the CLI and the SDK find the client user's file by
themselves (:meth:`Config.from_env`). Nothing else can connect.

One ``up`` per data home: it holds an exclusive ``flock`` on
``<data home>/up.lock`` for its lifetime and writes its pid and NATS URL to
``<data home>/up.json``; a second ``up`` on the same data home refuses, naming
the first (two nats-servers must never share a JetStream store). A file left by
a dead process does not count: the kernel released its lock.

Port: an explicit ``--port`` is used or refused, never moved; without one,
4222 is used when free, else a free port (and ``up`` says so). Busy means
"something listens": the check binds with ``SO_REUSEADDR`` as nats-server does,
so the TIME-WAIT sockets of a server just stopped do not count.

NATS itself is supervised too: the embedded server is restarted with backoff
on the same store and port when it dies or its ``/healthz`` (served on a loopback
port) keeps failing, as a stream does after a full disk; and it dies with ``up`` (SIGTERM on
the supervisor's death, Linux); a server an earlier ``up`` left running on the
store (its pid in ``<store>/nats-server.pid``) is stopped before a new one
starts, so two servers never share a store.

Progress: ``up`` pings ``$SRV.PING`` until every service answers, printing a
line per service with the time it took, and names the ones still not ready
after :data:`SLOW_AFTER` seconds.

The gateway (HTTP API, SSE, console, A2A) runs as one more child, as its own
NATS user, on ``127.0.0.1:8765`` (``--gateway-port`` or ``JIDO_GATEWAY_PORT``;
without either, or with ``0``, a free port when 8765 is busy). Once what answers
on that port proves it holds the token (``/healthz?challenge=``: an HMAC of a
fresh nonce, :mod:`jidocode.cli.console`), ``up`` prints its login URL with the
token, as Jupyter does (the token lives in ``<data home>/gateway/token``, 0600),
and writes the gateway's URL into ``up.json`` (``jidocode console`` prints the
login URL again). Another program on the port never sees the token (decision 0309).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import time
from pathlib import Path

import nats.errors
import typer

from jidocode.services.gateway.auth import load_or_create_token
from jidocode.services.gateway.settings import DEFAULT_PORT as GATEWAY_DEFAULT_PORT
from jidocode.services.gateway.settings import GatewaySettings
from jidocode.services.registry import RUNNABLE, SERVICES
from jidocode.shared import nats_permissions as perms
from jidocode.shared import subjects
from jidocode.shared.bus import connect_nats, describe_error, foreign_listener, gather
from jidocode.shared.config import (
    CLIENT_USER,
    Config,
    credentials_dir,
    default_data_home,
    read_credentials,
    same_server,
)
from jidocode.shared.natsserver import NatsServer, ensure_credentials, free_port, stop_orphan
from jidocode.shared.store_space import (
    STORE_ENV,
    StreamBudget,
    budget_env,
    format_bytes,
    refusal,
    sizes_in_effect,
    stream_budget,
)

from .console import check_gateway, login_url
from .supervisor import (
    DEFAULT_SPARES,
    Backoff,
    Child,
    LiveChildren,
    absolute_paths,
    children_file,
    say,
    spawn_service,
    stop_children,
    supervise_child,
    supervise_nats,
)
from .up_claim import DEFAULT_PORT, Claim, choose_port, claim_data_home, port_free, refuse_while_children_live

__all__ = [
    "DEFAULT_PORT",
    "SLOW_AFTER",
    "Backoff",
    "Child",
    "absolute_paths",
    "claim_data_home",
    "port_free",
    "refuse_while_children_live",
    "service_env",
    "spawn_service",
    "up",
]

#: Seconds after which ``up`` names the services that still do not answer ``$SRV.PING``.
SLOW_AFTER = (10.0, 30.0, 60.0)

#: Variables naming a NATS identity: a child gets its own, never the supervisor's.
_IDENTITY_VARS = ("NATS_USER", "NATS_PASSWORD", "NATS_CREDS", "NATS_TOKEN", "NATS_NKEY", "NATS_INBOX_PREFIX")


def service_env(base: dict[str, str], name: str, passwords: dict[str, str] | None) -> dict[str, str]:
    """The environment of service ``name``: ``base`` with its own NATS user (when there are users)."""
    if passwords is None:
        return dict(base)
    env = {
        k: v for k, v in base.items() if k not in _IDENTITY_VARS and not k.startswith("JIDO_NATS_PASSWORD")
    }
    env.update(
        NATS_USER=name,
        NATS_PASSWORD=passwords[name],
        NATS_INBOX_PREFIX=perms.inbox_prefix(name),
    )
    return env


def _known_passwords(nats_url: str) -> dict[str, str] | None:
    """The stored passwords of the embedded server at ``nats_url`` (another ``up``'s), if any."""
    client = read_credentials(CLIENT_USER)
    if client is None or not same_server(nats_url, client.url):
        return None
    found = {user: read_credentials(user) for user in perms.USERS}
    if any(creds is None for creds in found.values()):
        return None
    return {user: creds.password for user, creds in found.items() if creds is not None}


async def _run(
    nats_url: str | None,
    replicas: dict[str, int],
    grace: float,
    store: str | None,
    port: int,
    names: tuple[str, ...] = SERVICES,
    nats_wait: float = 30.0,
    gateway_port: int | None = None,
    claim: Claim | None = None,
    spares: frozenset[str] = frozenset(DEFAULT_SPARES),
) -> None:
    server: NatsServer | None = None
    passwords: dict[str, str] | None = None
    env = dict(os.environ)
    env["JIDO_SUPERVISOR_PID"] = str(os.getpid())
    env.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    if nats_url:
        passwords = _known_passwords(nats_url)
        users = "its JidoCode users" if passwords else "the NATS_* credentials of this environment"
        say("up", f"using NATS at {nats_url} as {users}")
        probe = (
            Config(nats_url=nats_url, nats_user="engine", nats_password=passwords["engine"])
            if passwords is not None
            else Config.from_env(nats_url=nats_url)
        )
        await _reach_nats(probe, nats_wait)
    else:
        server, passwords = await _start_embedded(store, port, env)
        nats_url = server.url
    env["NATS_URL"] = nats_url
    chosen_gateway_port = _choose_gateway_port(gateway_port) if "gateway" in names else None
    if chosen_gateway_port is not None:
        env["JIDO_GATEWAY_PORT"] = str(chosen_gateway_port)
    stopping = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stopping.set)
    children = [
        Child(name, replica=i, keep_spare=name in spares)
        for name in names
        for i in range(replicas.get(name, 1))
    ]
    live = LiveChildren(children_file(claim.data_home)) if claim is not None else None
    tasks = [
        asyncio.create_task(supervise_child(c, service_env(env, c.name, passwords), stopping, live))
        for c in children
    ]
    say("up", f"starting {', '.join(c.label for c in children)} — Ctrl-C to stop", "bold")
    if passwords is not None:
        client = Config(nats_url=nats_url, nats_user=CLIENT_USER, nats_password=passwords[CLIENT_USER])
    else:
        client = Config.from_env(nats_url=nats_url)
    progress = asyncio.create_task(_report_progress(client, [c for c in children if c.name in SERVICES]))
    gateway = (
        asyncio.create_task(_announce_gateway(chosen_gateway_port, claim))
        if chosen_gateway_port is not None
        else None
    )
    watch_nats = asyncio.create_task(supervise_nats(server, stopping)) if server is not None else None
    try:
        await stopping.wait()
    finally:
        progress.cancel()
        if gateway is not None:
            gateway.cancel()
        if watch_nats is not None:
            watch_nats.cancel()
        await asyncio.gather(progress, *([watch_nats] if watch_nats else []), return_exceptions=True)
        say("up", "stopping: draining services", "bold")
        await stop_children(children, grace)
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if server is not None:
            await asyncio.to_thread(server.stop)
            say("up", "NATS stopped", "bold")
        say("up", "all stopped", "bold")


async def _start_embedded(
    store: str | None, port: int, env: dict[str, str]
) -> tuple[NatsServer, dict[str, str]]:
    """Start the embedded server on ``store`` (default ``<data home>/nats``) and ``port``; its
    users' passwords. ``env`` gets the streams' sizes (:func:`_size_streams`)."""
    store_dir = default_data_home() / "nats" if store is None else Path(store)
    store_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    if store is None:  # journals and tool results: this user's alone
        os.chmod(store_dir, 0o700)
    budget = await _size_streams(store_dir, env)
    env[STORE_ENV] = str(store_dir)  # a write never acknowledged is named storage_full when it is full
    url = f"nats://127.0.0.1:{port}"
    passwords = await asyncio.to_thread(ensure_credentials, url)
    pid_file = store_dir / "nats-server.pid"
    orphan = await asyncio.to_thread(stop_orphan, pid_file)
    if orphan is not None:
        say(
            "up",
            f"stopped the nats-server (pid {orphan}) an earlier up left running on {store_dir}",
            "yellow",
        )
    server = NatsServer(
        store_dir=store_dir,
        port=port,
        sync="always",
        log_file=store_dir / "nats-server.log",
        users=passwords,
        pid_file=pid_file,
        die_with_parent=True,
        monitor_port=0,  # /healthz on loopback: a wedged server is restarted
        max_file_store=budget.server_max_bytes,  # not the free space of a full disk at a restart
    )
    await asyncio.to_thread(server.start)
    say("up", f"NATS listening on {server.url} (JetStream store {store_dir}, sync_interval: always)", "bold")
    say(
        "up",
        f"NATS users: one per service and `client` (credentials in {credentials_dir()}, this user only); "
        "other terminals find them: just run `jidocode chat`",
        "bold",
    )
    return server, passwords


async def _size_streams(store_dir: Path, env: dict[str, str]) -> StreamBudget:
    """Put the streams' sizes chosen for ``store_dir`` (:mod:`jidocode.shared.store_space`) into
    ``env`` where the user set none; exit 1, saying why, when a new store's streams cannot fit."""
    budget = await asyncio.to_thread(stream_budget, store_dir)
    sized = budget_env(budget, env)
    env.update(sized)
    if not (store_dir / "jetstream").exists():  # a new store: nats-server checks every reservation
        free = (await asyncio.to_thread(shutil.disk_usage, store_dir)).free
        problem = refusal(sizes_in_effect(env), free, store_dir)
        if problem is not None:
            say("up", problem, "red")
            raise typer.Exit(1)
    if sized:
        shown = ", ".join(f"{var}={format_bytes(int(value))}" for var, value in sized.items())
        say("up", f"streams sized from the free space of the store's disk when it was made: {shown}")
    return budget


async def _reach_nats(config: Config, wait: float) -> None:
    """Return once the NATS at ``config.nats_url`` accepts us; say so and exit 1 after ``wait`` s.

    Services would otherwise retry forever against a wrong ``NATS_URL`` with nothing said.
    A refusal (bad credentials) or another program on the port (not NATS) ends the wait at once:
    retrying cannot fix it.
    """
    deadline = time.monotonic() + wait
    said = False
    while True:
        try:
            nc = await connect_nats(config, "up-check", wait=False)
        except (nats.errors.Error, OSError) as exc:
            failure: BaseException = exc
        else:
            await nc.close()
            return
        foreign = await foreign_listener(config.nats_url, failure)
        if foreign is not None:  # retrying cannot fix a refusal nor another program on the port
            say("up", foreign, "red")
            raise typer.Exit(1)
        problem = describe_error(failure.__cause__ or failure)
        if time.monotonic() >= deadline:
            say(
                "up",
                f"cannot reach NATS at {config.nats_url} after {wait:g} s ({problem}): check NATS_URL, "
                "or unset it to run the embedded server",
                "red",
            )
            raise typer.Exit(1)
        if not said:
            say("up", f"waiting for NATS at {config.nats_url} (up to {wait:g} s): {problem}", "yellow")
            said = True
        await asyncio.sleep(min(1.0, max(0.0, deadline - time.monotonic())))  # retry backoff


async def _report_progress(config: Config, children: list[Child]) -> None:
    """A line per service when it first answers ``$SRV.PING`` (with the time it took); the ones
    still silent after each of :data:`SLOW_AFTER` seconds; one line when all are ready."""
    started = time.monotonic()
    expected: dict[str, int] = {}
    for c in children:
        micro = subjects.SERVICE_NAMES[c.name]
        expected[micro] = expected.get(micro, 0) + 1
    label = {subjects.SERVICE_NAMES[c.name]: c.name for c in children}
    try:
        nc = await connect_nats(config, "up-progress", wait=True)
    except Exception as exc:  # progress is a courtesy: never stop the system for it
        say("up", f"cannot follow the services' start ({describe_error(exc)})", "red")
        return
    try:
        answered: dict[str, set[str]] = {}
        warned = 0
        while True:
            for msg in await gather(nc, subjects.srv("PING"), wait=0.3):
                with contextlib.suppress(ValueError, KeyError, TypeError):
                    info = json.loads(msg.data)
                    name, instance = str(info["name"]), str(info["id"])
                    if name not in expected or instance in answered.setdefault(name, set()):
                        continue
                    answered[name].add(instance)
                    n, want = len(answered[name]), expected[name]
                    count = f" ({n}/{want})" if want > 1 else ""
                    say("up", f"{label[name]} ready{count} in {time.monotonic() - started:.1f} s", "green")
            waiting = [label[m] for m, want in expected.items() if len(answered.get(m, ())) < want]
            elapsed = time.monotonic() - started
            if not waiting:
                say("up", f"all {len(children)} services ready in {elapsed:.1f} s", "bold green")
                return
            if warned < len(SLOW_AFTER) and elapsed >= SLOW_AFTER[warned]:
                warned += 1
                say("up", f"still not ready after {elapsed:.0f} s: {', '.join(waiting)}", "yellow")
    finally:
        await nc.close()


def _choose_gateway_port(port: int | None) -> int:
    """The gateway's port: ``--gateway-port`` or ``JIDO_GATEWAY_PORT`` as given (``0``: a free
    one, chosen here so that ``up`` knows it); else 8765, or a free port when 8765 is busy (and
    ``up`` says so)."""
    if port is None and os.environ.get("JIDO_GATEWAY_PORT"):
        port = GatewaySettings.from_env().port
    if port == 0:
        return free_port()
    if port is not None:
        return port
    if port_free(GATEWAY_DEFAULT_PORT):
        return GATEWAY_DEFAULT_PORT
    chosen = free_port()
    say("up", f"port {GATEWAY_DEFAULT_PORT} is busy; the gateway uses the free port {chosen}")
    return chosen


async def _announce_gateway(port: int, claim: Claim | None, timeout: float = 120.0) -> None:
    """Once the program on the gateway's ``port`` proves it is our gateway (it holds the token):
    its login URL with the token (as Jupyter does), and its URL in ``up.json``.

    A foreign program answering there is named, once, and never sees the token; the gateway,
    restarted with backoff, takes the port when that program lets it go.
    """
    settings = GatewaySettings.from_env(port=port)
    token = settings.token
    if token is None:
        token = await asyncio.to_thread(load_or_create_token, settings.data_home)
    host = "127.0.0.1" if settings.host in ("0.0.0.0", "::", "") else settings.host
    base = GatewaySettings(host=host, port=port).base_url
    started = time.monotonic()
    named_foreign = False
    while time.monotonic() - started < timeout:
        checked = await check_gateway(base, token, timeout=2.0)
        if checked.ours:
            took = time.monotonic() - started
            say("up", f"the gateway answers on {base} (after {took:.1f} s)", "green")
            if claim is not None:
                await asyncio.to_thread(claim.announce_gateway, base)
            say("up", f"open the console: {login_url(base, token)}", "bold")
            return
        if checked.state == "foreign" and not named_foreign:
            named_foreign = True
            say(
                "up",
                f"{checked.problem()}. Stop that program (the gateway takes the port once it is free) "
                "or pass another --gateway-port",
                "red",
            )
        await asyncio.sleep(0.2)  # polling a port that has no change notification
    say("up", f"the gateway did not answer as ours on {base} within {timeout:g} s", "yellow")


def _service_names(text: str, option: str) -> tuple[str, ...]:
    """The services a comma-separated ``text`` names (``BadParameter`` naming an unknown one)."""
    names = tuple(n.strip().replace("-", "_") for n in text.split(",") if n.strip())
    unknown = sorted(set(names) - set(RUNNABLE))
    if unknown:
        raise typer.BadParameter(
            f"unknown service(s) {', '.join(unknown)}: expected {', '.join(RUNNABLE)}", param_hint=option
        )
    return names


def up(
    port: int | None = typer.Option(
        None,
        help=f"port of the embedded NATS server: used or refused, never moved "
        f"(default {DEFAULT_PORT}, or a free port when {DEFAULT_PORT} is busy)",
    ),
    store: str | None = typer.Option(None, help="JetStream store directory (default: the user's data dir)"),
    conversation_replicas: int = typer.Option(1, min=1, max=8, help="conversation service replicas"),
    tool_runner_replicas: int = typer.Option(1, min=1, max=8, help="tool runner replicas"),
    grace: float = typer.Option(10.0, help="seconds each service gets to drain on stop"),
    only: str | None = typer.Option(
        None, help="comma-separated services to run (default: all five and the gateway)"
    ),
    nats_wait: float = typer.Option(
        30.0, min=0.0, help="with NATS_URL: seconds to wait for that server before giving up"
    ),
    gateway_port: int | None = typer.Option(
        None,
        min=0,
        max=65535,
        help=f"port of the HTTP gateway (default {GATEWAY_DEFAULT_PORT}, or a free port when it is busy)",
    ),
    spares: str = typer.Option(
        ",".join(DEFAULT_SPARES),
        envvar="JIDO_UP_SPARES",
        help="comma-separated services kept warm for an instant restart, or 'none'",
    ),
) -> None:
    """Run the whole system: embedded NATS (unless NATS_URL is set) and every service."""
    nats_url = os.environ.get("NATS_URL") or None
    replicas = {"conversation": conversation_replicas, "tool_runner": tool_runner_replicas}
    warm = () if spares.strip().lower() == "none" else _service_names(spares, "--spares")
    names = RUNNABLE
    if only:
        names = _service_names(only, "--only")
    if nats_url:
        with contextlib.suppress(KeyboardInterrupt):
            asyncio.run(
                _run(
                    nats_url,
                    replicas,
                    grace,
                    store,
                    0,
                    names,
                    nats_wait,
                    gateway_port,
                    spares=frozenset(warm),
                )
            )
        return
    with claim_data_home(default_data_home()) as claim:  # exits if another `up` runs there
        refuse_while_children_live(claim.data_home)
        chosen = choose_port(port)
        claim.announce(f"nats://127.0.0.1:{chosen}")
        with contextlib.suppress(KeyboardInterrupt):
            asyncio.run(
                _run(
                    None,
                    replicas,
                    grace,
                    store,
                    chosen,
                    names,
                    gateway_port=gateway_port,
                    claim=claim,
                    spares=frozenset(warm),
                )
            )
