"""`jidocode watch`: observability is a bus subscriber.

Tails every JidoCode event, one readable line each (or JSON lines), filtered
by project, conversation and type. ``--filter skill`` is seed 001's
``SkillLifecycleSubscriber``: only skill pre/post hooks and registry updates,
with a count per type printed on exit.
"""

from __future__ import annotations

import asyncio
import fnmatch
import json
import signal
from collections import Counter
from typing import Any

import typer
from rich.markup import escape

from jidocode.shared import subjects
from jidocode.shared.envelope import Envelope
from jidocode.shared.errors import JidoError

from .common import cli_bus, console, err_console, run

__all__ = ["EventFilter", "summarize", "watch"]


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


def watch(
    project: str | None = typer.Option(None, "--project", "-p", help="only this project id"),
    conversation: str | None = typer.Option(None, "--conversation", "-c", help="only this conversation id"),
    type_: list[str] = typer.Option([], "--type", "-t", help="only these event types (glob, repeatable)"),
    preset: str | None = typer.Option(None, "--filter", help="'skill': skill lifecycle hooks and registry"),
    json_out: bool = typer.Option(False, "--json", help="print each event as one JSON line"),
    limit: int = typer.Option(0, "--limit", help="stop after this many events (0: run until Ctrl-C)"),
) -> None:
    """Tail every event on the bus, one line each."""
    flt = EventFilter(project, conversation, type_, preset)
    counts: Counter[str] = Counter()

    async def main() -> None:
        done = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, done.set)
        async with cli_bus("watch") as bus:

            async def on_msg(msg: Any) -> None:
                from jidocode.shared.envelope import decode

                try:
                    env = decode(msg.data, msg.headers)
                except JidoError as exc:
                    if not json_out:
                        err_console.print(f"[red]invalid[/] {msg.subject}: {escape(exc.message)}")
                    return
                if not flt.matches(env, msg.subject):
                    return
                counts[env.type] += 1
                if json_out:
                    print(
                        json.dumps({"subject": msg.subject, **env.to_dict()}, ensure_ascii=False), flush=True
                    )
                else:
                    when = (env.time or "")[11:23]
                    scope = "/".join(x[-6:] for x in (env.project_id, env.conversation_id) if x)
                    console.print(
                        f"[dim]{when}[/] [bold cyan]{escape(env.type)}[/] [dim]{scope}[/] {summarize(env)}",
                        highlight=False,
                        soft_wrap=True,
                    )
                if limit and sum(counts.values()) >= limit:
                    done.set()

            await bus.nc.subscribe(subjects.all_subjects(), cb=on_msg)
            if not json_out:
                err_console.print(
                    f"[dim]watching {bus.nc.connected_url.netloc if bus.nc.connected_url else ''} — Ctrl-C to stop[/]"
                )  # type: ignore[union-attr]
            await done.wait()

    run(main)
    if preset == "skill" and not json_out:
        for event_type, n in sorted(counts.items()):
            err_console.print(f"{event_type}: {n}")
