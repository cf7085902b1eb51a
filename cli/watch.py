"""`jidocode watch`: observability is a bus subscriber.

Tails every JidoCode event, one readable line each (or JSON lines), filtered
by project, conversation and type. ``--filter skill`` is seed 001's
``SkillLifecycleSubscriber``: only skill pre/post hooks and registry updates,
with a count per type printed on exit.

**Each event once, in arrival order, with its subject.** One event travels on
several subjects: a user message is published on ``jido.conv.<p>.<c>.in``,
appended to the journal ``jido.journal.<p>.<c>`` and published again as output
on ``jido.evt.<p>.<c>.<type>``, all with the same event id. ``watch``
subscribes once to ``jido.>`` and shows the first copy of each id (the
subject it arrived on), skipping the later ones.

**Replay.** ``--since <event id|time>`` first reads the stored conversation
output (stream ``JIDO_EVENTS``, in stream order) after that event or since that
time, then goes on live. Signals (``jido.sig``), hooks and requests are not
stored, so they are only shown live. The live subscription is made before the
replay starts and buffers what arrives meanwhile; that buffer is shown after
the replay, deduplicated by id, so nothing is lost or doubled at the seam.
"""

from __future__ import annotations

import asyncio
import fnmatch
import json
import re
import signal
from collections import Counter, OrderedDict
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from datetime import time as dtime
from typing import Any, Literal

import nats.js.errors
import typer
from nats.js.api import ConsumerConfig, DeliverPolicy
from rich.markup import escape

from jidocode.shared import subjects
from jidocode.shared.bus import Bus
from jidocode.shared.envelope import Envelope, decode
from jidocode.shared.errors import JidoError, NotFound

from .common import NatsReach, cli_bus, console, err_console, run
from .watch_tree import TurnTree, cloudevent_line

__all__ = ["EventFilter", "Seen", "format_line", "parse_since", "summarize", "ulid_time", "watch"]

#: How many event ids ``watch`` remembers to skip later copies of the same event.
SEEN_IDS = 100_000
#: An event is stored a little after its id was made (and hosts' clocks differ):
#: the replay after an event id starts this long before the time in the id.
_ID_SLACK = timedelta(minutes=10)
_AGE = re.compile(r"^(\d+(?:\.\d+)?)\s*([smhd])$")
_AGE_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
_CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
_ULID = re.compile(r"^[0-7][0-9A-HJKMNP-TV-Z]{25}$", re.IGNORECASE)


class EventFilter:
    """Which events to show: all given criteria must match."""

    def __init__(
        self,
        project: str | None = None,
        conversation: str | None = None,
        types: list[str] | None = None,
        preset: str | None = None,
    ) -> None:
        self.project = project
        self.conversation = conversation
        self.types = types or []
        if preset not in (None, "skill"):
            raise typer.BadParameter(f"unknown filter {preset!r}: expected 'skill'")
        self.preset = preset

    def matches(self, env: Envelope, nats_subject: str) -> bool:
        if self.project and env.project_id != self.project and self.project not in nats_subject.split("."):
            return False
        if (
            self.conversation
            and env.conversation_id != self.conversation
            and (self.conversation not in nats_subject.split("."))
        ):
            return False
        if self.types and not any(fnmatch.fnmatchcase(env.type, t) for t in self.types):
            return False
        if self.preset == "skill":
            return nats_subject.startswith(subjects.hook_filter()[:-1]) or env.type.startswith("skill")
        return True

    def stored_subject(self) -> str:
        """The ``JIDO_EVENTS`` filter of a replay: narrowed to the project/conversation when given."""
        try:
            return subjects.conversation_out_filter(self.project, self.conversation)
        except ValueError:
            return subjects.conversation_out_filter()


class Seen:
    """The ids of the last ``size`` events shown: later copies of an event are skipped."""

    def __init__(self, size: int = SEEN_IDS) -> None:
        self.size = size
        self._ids: OrderedDict[str, None] = OrderedDict()

    def first(self, event_id: str) -> bool:
        """True the first time ``event_id`` is offered (then it is remembered)."""
        if event_id in self._ids:
            return False
        self._ids[event_id] = None
        if len(self._ids) > self.size:
            self._ids.popitem(last=False)
        return True


def ulid_time(event_id: str) -> datetime | None:
    """When a ULID event id was made (its 48-bit milliseconds), or ``None`` for another id."""
    if not _ULID.fullmatch(event_id):
        return None
    ms = 0
    for ch in event_id[:10].upper():
        ms = ms * 32 + _CROCKFORD.index(ch)
    return datetime.fromtimestamp(ms / 1000, UTC)


def parse_since(value: str, now: datetime | None = None) -> datetime | str:
    """``--since``: a time (aware, UTC) or else an event id (returned as is).

    Times: ISO 8601 (``2026-11-24T08:25:00Z``; without an offset it is local
    time), a time of day today (``08:25``, ``08:25:30``), or an age (``90s``,
    ``15m``, ``2h``, ``1d``).
    """
    text = value.strip()
    if not text:
        raise typer.BadParameter("--since needs an event id or a time")
    now = now or datetime.now(UTC)
    age = _AGE.fullmatch(text)
    if age:
        return now - timedelta(seconds=float(age.group(1)) * _AGE_UNITS[age.group(2)])
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        try:
            day = dtime.fromisoformat(text)
        except ValueError:
            return text  # an event id
        local_now = now.astimezone()
        when = datetime.combine(local_now.date(), day, tzinfo=day.tzinfo or local_now.tzinfo)
    if when.tzinfo is None:
        when = when.astimezone()  # naive: local time
    return when.astimezone(UTC)


def summarize(env: Envelope) -> str:
    """A short, readable summary of an event's data."""
    data = env.data
    if not isinstance(data, dict):
        return escape(str(data)[:120])
    parts: list[str] = []
    for key, value in data.items():
        if value in (None, "", [], {}):
            continue
        text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
        parts.append(f"{key}={text[:60]}")
    return escape(" ".join(parts)[:160])


def format_line(env: Envelope, nats_subject: str) -> str:
    """One event as a rich-markup line: time, subject (and the type when the subject does not end with it), data."""
    when = (env.time or "")[11:23]
    try:
        tail = nats_subject.endswith("." + subjects.type_tokens(env.type))
    except ValueError:
        tail = False
    kind = "" if tail else f" [cyan]{escape(env.type)}[/]"
    return f"[dim]{when}[/] [bold]{escape(nats_subject)}[/]{kind} {summarize(env)}"


def _message_id(msg: Any) -> str | None:
    """The event id of a stored message (its ``Nats-Msg-Id`` is scoped by the stream, not the id)."""
    try:
        return decode(msg.data, msg.headers).id
    except JidoError:
        return None


async def replay(
    bus: Bus,
    since: datetime | str,
    flt: EventFilter,
    show: Callable[[Any], None],
    stop: asyncio.Event,
) -> int:
    """Show the stored events after ``since`` (an event id or a time), in stream order.

    Returns how many stored messages were handed to ``show``. An event id that
    is not stored is ``NotFound``.
    """
    target = since if isinstance(since, str) else None
    start = since if isinstance(since, datetime) else ulid_time(since)
    if target is not None and start is not None:
        start -= _ID_SLACK
    config = (
        ConsumerConfig(deliver_policy=DeliverPolicy.BY_START_TIME, opt_start_time=start)
        if start is not None
        else ConsumerConfig(deliver_policy=DeliverPolicy.ALL)
    )
    found = target is None
    shown = 0
    caught_up = asyncio.Event()

    async def _cb(msg: Any) -> None:
        nonlocal found, shown
        if caught_up.is_set():
            return  # live from here on: the core subscription shows it
        if found:
            show(msg)
            shown += 1
        elif _message_id(msg) == target:
            found = True
        if msg.metadata.num_pending == 0:
            caught_up.set()

    try:
        sub = await bus.js.subscribe(
            flt.stored_subject(),
            stream=subjects.STREAM_EVENTS,
            cb=_cb,
            ordered_consumer=True,
            config=config,
        )
    except nats.js.errors.NotFoundError:
        sub = None  # no conversation has run yet: nothing is stored
    if sub is not None:
        try:
            info = await sub.consumer_info()
            if info.num_pending or (info.delivered and info.delivered.stream_seq):
                waiters = [asyncio.create_task(caught_up.wait()), asyncio.create_task(stop.wait())]
                try:
                    await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
                finally:
                    for w in waiters:
                        w.cancel()
            caught_up.set()
        finally:
            await sub.unsubscribe()
    if not found and not stop.is_set():
        hint = (
            f" (it was made at {start + _ID_SLACK:%Y-%m-%dT%H:%M:%SZ}: try --since with that time)"
            if start
            else ""
        )
        raise NotFound(
            f"event {target!r} is not among the stored events of stream {subjects.STREAM_EVENTS} "
            f"(it keeps conversation output; signals and requests are not stored){hint}",
            details={"since": target},
        )
    return shown


def watch(
    project: str | None = typer.Option(None, "--project", "-p", help="only this project id"),
    conversation: str | None = typer.Option(None, "--conversation", "-c", help="only this conversation id"),
    type_: list[str] = typer.Option([], "--type", "-t", help="only these event types (glob, repeatable)"),
    preset: str | None = typer.Option(None, "--filter", help="'skill': skill lifecycle hooks and registry"),
    json_out: bool = typer.Option(
        False,
        "--json",
        help="print each event as one JSON CloudEvent a line (natssubject: where it was seen)",
    ),
    limit: int = typer.Option(0, "--limit", help="stop after this many events (0: run until Ctrl-C)"),
    since: str | None = typer.Option(
        None,
        "--since",
        help="first replay the stored conversation output after this event id, or since this time "
        "(ISO 8601, HH:MM[:SS] today, or an age: 90s, 15m, 2h, 1d), then go on live; "
        "signals and requests are not stored",
    ),
    tree: bool = typer.Option(
        False, "--tree", help="group by conversation: each turn as a tree (request → LLM → tools → answer)"
    ),
) -> None:
    """Tail every event on the bus, one line each: each event once, in arrival order, with its subject."""
    if tree and json_out:
        raise typer.BadParameter("--tree and --json are two ways to print: choose one")
    printer = _Printer(
        EventFilter(project, conversation, type_, preset),
        mode="json" if json_out else "tree" if tree else "lines",
        limit=limit,
    )
    start = parse_since(since) if since is not None else None
    run(lambda: _tail(printer, start))
    if preset == "skill" and not json_out:
        for event_type, n in sorted(printer.counts.items()):
            err_console.print(f"{event_type}: {n}")


class _Printer:
    """Prints each matching event once (``mode``: one line, a turn tree, or JSON), counting them by
    type up to ``limit`` (0: no limit)."""

    def __init__(self, flt: EventFilter, *, mode: Literal["lines", "tree", "json"], limit: int) -> None:
        self.flt = flt
        self.mode = mode
        self.limit = limit
        self.counts: Counter[str] = Counter()
        self.seen = Seen()
        self.turns = TurnTree()

    @property
    def full(self) -> bool:
        """Whether ``limit`` events were shown."""
        return bool(self.limit) and sum(self.counts.values()) >= self.limit

    def show(self, msg: Any) -> None:
        """Print one message (synchronous: nothing interleaves with it)."""
        try:
            env = decode(msg.data, msg.headers)
        except JidoError as exc:
            if self.mode != "json":
                err_console.print(f"[red]invalid[/] {escape(msg.subject)}: {escape(exc.message)}")
            return
        if not self.seen.first(env.id) or not self.flt.matches(env, msg.subject) or self.full:
            return
        self.counts[env.type] += 1
        if self.mode == "json":
            print(cloudevent_line(env, msg.subject), flush=True)
        elif self.mode == "tree":
            for line in self.turns.add(env):
                console.print(escape(line), highlight=False, soft_wrap=True)
        else:
            console.print(format_line(env, msg.subject), highlight=False, soft_wrap=True)


async def _tail(printer: _Printer, start: datetime | str | None) -> None:
    """Show the stored events from ``start`` (if given), then live ones until Ctrl-C or the limit.

    The live subscription is made first; what it gets during the replay is held back and shown
    after it (:class:`Seen` drops the copies the replay already showed)."""
    done = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, done.set)
    async with cli_bus("watch") as bus:
        reach = NatsReach(bus, done.set, "watch")  # NATS lost for good: say so, exit 1, never retry forever
        backlog: list[Any] | None = None if start is None else []

        async def on_msg(msg: Any) -> None:
            if backlog is None:
                printer.show(msg)
            else:
                backlog.append(msg)  # arrived during the replay: shown after it
            if printer.full:
                done.set()

        await bus.nc.subscribe(subjects.all_subjects(), cb=on_msg)
        await bus.nc.flush()  # the server has the subscription: nothing published from now on is missed
        url = bus.nc.connected_url.netloc if bus.nc.connected_url else ""
        err_console.print(f"[dim]watching {url} — Ctrl-C to stop[/]")
        if start is not None and backlog is not None:
            n = await replay(bus, start, printer.flt, printer.show, done)
            held, backlog = backlog, None
            for msg in held:
                printer.show(msg)
            err_console.print(f"[dim]replayed {n} stored event(s) from {subjects.STREAM_EVENTS}; now live[/]")
            if printer.full:
                done.set()
        await done.wait()
        reach.check()
