"""``/prd`` in ``jidocode chat``: the project's PRD loops without leaving the chat.

==========================  ===============================================================
``/prd`` (``/prd list``)    the PRDs: stories passed, the one in progress, the loop's state
``/prd status <name>``      the stories with their state marks and the loop (as ``prd show``)
``/prd run <name>``         start the loop and follow it: the same lines as ``prd run`` until
                            it completes, fails or stops; Ctrl-C stops following, the loop
                            runs on (``/prd status`` looks again, ``/prd pause`` pauses it)
``/prd pause <name>``       pause the loop (the running iteration is cancelled)
==========================  ===============================================================

Everything goes through :class:`PrdClient` on the chat's own connection; loop events come from
the ``JIDO_PRD`` stream through :class:`~.prd_follow.PrdFollower` and are drawn by
:mod:`.prd_render` (text from a model or a PRD is never markup: it prints as written).
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import signal
from collections.abc import Callable, Iterator
from typing import Final, Protocol

from rich.console import Console
from rich.text import Text

from jidocode.client import JidoClient
from jidocode.shared.clients import PrdClient
from jidocode.shared.errors import InvalidInput
from jidocode.shared.events.prd import LoopInfo, PrdEvent, PrdLoopStateChanged

from .prd_follow import PrdFollower
from .prd_render import LineRenderer, exit_code_for, header_text, safe, story_rows, story_text

__all__ = ["PRD_USAGE", "EventFeed", "follow_until_done", "parse_prd", "run_prd"]

PRD_USAGE: Final = "/prd [list] | /prd status <name> | /prd run <name> | /prd pause <name>"
_NAME: Final = re.compile(r"^[A-Za-z0-9_\-]{1,64}$")
#: Seconds a request to the prd service may take.
_TIMEOUT_S: Final = 30.0

out = Console(highlight=False)
err = Console(stderr=True, highlight=False)


def parse_prd(arguments: str) -> tuple[str, str]:
    """``/prd``'s words as ``(verb, name)``; :class:`InvalidInput` naming what is wrong."""
    words = arguments.split()
    verb = words[0].lower() if words else "list"
    if verb == "list" and len(words) <= 1:
        return "list", ""
    if verb not in ("status", "run", "pause") or len(words) != 2:
        raise InvalidInput(f"usage: {PRD_USAGE}", details={"arguments": arguments})
    if not _NAME.match(words[1]):
        raise InvalidInput(
            f"{words[1]!r} is not a PRD name (1 to 64 letters, digits, '_' and '-')",
            details={"name": words[1]},
        )
    return verb, words[1]


async def run_prd(client: JidoClient, arguments: str) -> None:
    """Do what ``/prd <arguments>`` asks (the chat's built-in command)."""
    verb, name = parse_prd(arguments)
    prds = PrdClient(client.bus, client.project_id, timeout=_TIMEOUT_S)
    if verb == "list":
        await _list(prds)
    elif verb == "status":
        await _status(prds, name)
    elif verb == "pause":
        _loop_line(await prds.pause(name))
    else:
        await _run(prds, name)


async def _list(prds: PrdClient) -> None:
    listed = await prds.list()
    if not listed.prds:
        out.print(Text("no PRDs in this project (jidocode prd new <dir> <name> creates one)", style="dim"))
    for prd in listed.prds:
        line = Text.assemble(
            (safe(prd.name), "bold"),
            f"  {prd.state}  {prd.passed}/{prd.stories} passed",
            (safe(f"  ▶ {prd.in_progress}") if prd.in_progress else "", "yellow"),
            (safe(f"  {prd.title}") if prd.title else "", "dim"),
            (safe(f"  ({prd.problem})") if prd.problem else "", "red"),
        )
        out.print(line)


async def _status(prds: PrdClient, name: str) -> None:
    view = await prds.get(name)
    loop = view.loop
    out.print(
        header_text(
            view.name,
            loop.state if loop else "ready",
            loop.story_id if loop else "",
            loop.attempt if loop else 0,
        )
    )
    if loop is not None and loop.error:
        out.print(Text(safe(f"error: {loop.error}"), style="red"))
    rows = story_rows(view.prd)
    out.print(Text(f"stories ({sum(r.state == 'passed' for r in rows)}/{len(rows)} passed):", style="bold"))
    for row in rows:
        line = Text("  ").append_text(story_text(row, current=loop is not None and row.id == loop.story_id))
        out.print(line.append(f"  ({row.attempts} attempts)" if row.attempts else "", style="dim"))


def _loop_line(loop: LoopInfo) -> None:
    out.print(Text.assemble("loop of ", (safe(loop.prd), "bold"), ": ", (loop.state, "bold")))


async def _run(prds: PrdClient, name: str) -> None:
    view = await prds.get(name)
    follower = await PrdFollower(
        prds.bus, prds.project_id, name, after_seq=view.loop.seq if view.loop else 0
    ).start()
    try:
        await prds.run(name)
        err.print(
            Text.assemble(
                "following ", (safe(name), "bold"), " (Ctrl-C stops following; the loop runs on)", style="dim"
            )
        )
        stopped = asyncio.Event()
        with _sigint_sets(stopped):
            code = await follow_until_done(follower, lambda text: out.print(text), stopped)
    finally:
        await follower.close()
    if code is None:
        err.print(
            Text.assemble(
                "stopped following ",
                (safe(name), "bold"),
                f"; the loop runs on: /prd status {name}",
                style="yellow",
            )
        )


class EventFeed(Protocol):
    """What :func:`follow_until_done` reads (a started :class:`PrdFollower`)."""

    async def next(self) -> PrdEvent | None: ...


async def follow_until_done(
    follower: EventFeed, emit: Callable[[Text], None], stopped: asyncio.Event
) -> int | None:
    """Show the loop's events from its next ``→ running`` (an earlier run's end must not end this
    one) until it ends; the exit code its end means (:func:`exit_code_for`), ``None`` once
    ``stopped`` is set."""
    renderer = LineRenderer(command_output=False)
    started = False
    while not stopped.is_set():
        event = await follower.next()
        if event is None:
            continue
        started = started or (isinstance(event, PrdLoopStateChanged) and event.to_state == "running")
        if not started:
            continue
        for text in renderer.feed(event):
            emit(text)
        code = exit_code_for(event)
        if code is not None:
            for text in renderer.flush():
                emit(text)
            return code
    for text in renderer.flush():
        emit(text)
    return None


@contextlib.contextmanager
def _sigint_sets(event: asyncio.Event) -> Iterator[None]:
    """Within: Ctrl-C sets ``event`` (stop following) instead of interrupting the chat."""
    loop = asyncio.get_running_loop()
    with contextlib.suppress(NotImplementedError, RuntimeError):
        loop.add_signal_handler(signal.SIGINT, event.set)
    try:
        yield
    finally:
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.remove_signal_handler(signal.SIGINT)
