"""``jidocode conversations list|show|stop|delete``: a project's conversations and their lifecycle.

``list`` shows each conversation's status, the replica running it (none when it
is idle or stopped: it is loaded again by its next input), when it was created
and when it last did something; ``show`` adds what its projections say (its
state, LLM calls, tokens and cost); ``stop`` ends what it runs (its LLM call,
its tool calls) and lets it go (``jidocode chat <dir> --conversation <id>`` or
``start`` brings it back, history and all); ``delete`` removes it for good;
``prune`` deletes those that ended days ago (decision 0325).
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import typer
from rich.text import Text

from jidocode.shared.clients import ConversationsClient
from jidocode.shared.cost import cost_text
from jidocode.shared.errors import NotFound
from jidocode.shared.events.conversation import (
    ConversationDeleted,
    ConversationInfo,
    ConversationList,
    ConversationsPruned,
    ConversationSummary,
)

from .common import cli_bus, console, print_json, resolve_project, run

__all__ = ["app"]

app = typer.Typer(
    rich_markup_mode=None,
    help="A project's conversations: list, show, stop, delete, prune.",
    no_args_is_help=True,
)

PROJECT_DIR = typer.Argument(..., help="the project's directory")
JSON = typer.Option(False, "--json", help="print JSON")


@app.command("list")
def list_(project_dir: str = PROJECT_DIR, json_out: bool = JSON) -> None:
    """The project's conversations, newest first."""

    async def main() -> ConversationList:
        async with cli_bus("conversations") as bus:
            info = await resolve_project(bus, project_dir)
            return await ConversationsClient(bus, info.project_id).list()

    found = run(main)
    if json_out:
        print_json(found)
        return
    if not found.conversations:
        console.print("no conversation yet")
    for head, title in conversation_lines(found.conversations, console.width):
        console.print(head, soft_wrap=True)
        console.print(title, soft_wrap=True)
    if found.truncated:
        console.print(f"[dim]only the newest {len(found.conversations)} are shown[/]")


def short_time(value: str | None) -> str:
    """An ISO time as ``2026-11-25 20:26`` in UTC (its own text when it is not one, ``-`` for none)."""
    if not value:
        return "-"
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        return value
    if moment.tzinfo is not None:
        moment = moment.astimezone(UTC)
    return moment.strftime("%Y-%m-%d %H:%M")


def conversation_lines(conversations: list[ConversationSummary], width: int) -> list[tuple[Text, Text]]:
    """Two lines per conversation: its whole id first (printed unwrapped, so never cut),
    with its status, last activity and replica; then its title indented, cut to ``width``.
    The title is a user's text: shown as text, never as markup."""
    lines: list[tuple[Text, Text]] = []
    for c in conversations:
        head = Text.assemble(
            (c.conversation_id, "bold"),
            "  ",
            (c.status, "green" if c.status == "active" else "yellow"),
            "  ",
            short_time(c.last_activity or c.created_at),
            f"  on {c.owner}" if c.owner else "",
        )
        title = Text("  " + (c.title or "(no message yet)"), style="" if c.title else "dim")
        title.truncate(max(width, 8), overflow="ellipsis")
        lines.append((head, title))
    return lines


@app.command()
def show(
    project_dir: str = PROJECT_DIR,
    conversation_id: str = typer.Argument(..., help="the conversation"),
    json_out: bool = JSON,
) -> None:
    """One conversation: its record, where it runs, its state, LLM calls, tokens and cost."""

    async def main() -> dict[str, Any]:
        async with cli_bus("conversations") as bus:
            info = await resolve_project(bus, project_dir)
            client = ConversationsClient(bus, info.project_id)
            listed = await client.list(conversation_id=conversation_id)
            found = next(iter(listed.conversations), None)
            if found is None:
                raise NotFound(
                    f"no conversation {conversation_id!r} in {info.root_path}",
                    details={"conversation_id": conversation_id},
                )
            diagnostics = (await client.get_projection(conversation_id, "diagnostics")).value or {}
            usage = (await client.get_projection(conversation_id, "usage")).value or {}
            return {**found.model_dump(mode="json"), "diagnostics": diagnostics, "usage": usage}

    shown = run(main)
    if json_out:
        print_json(shown)
        return
    diag, usage = shown["diagnostics"], shown["usage"]
    rows = [
        ("conversation", shown["conversation_id"]),
        ("title", shown.get("title") or "-"),
        ("status", f"{shown['status']} ({diag.get('status', '?')})"),
        ("running on", shown["owner"] or "- (loaded again by its next input)"),
        ("created", shown["created_at"]),
        ("last activity", shown["last_activity"] or "-"),
        ("entries", str(diag.get("timeline_length", 0))),
        ("llm calls", str(usage.get("calls", 0))),
        (
            "tokens",
            f"{usage.get('total_tokens', 0)} ({usage.get('prompt_tokens', 0)} in, "
            f"{usage.get('completion_tokens', 0)} out)",
        ),
        ("cost", cost_text(float(usage.get("cost_usd") or 0.0), int(usage.get("unpriced_calls") or 0))),
        ("model", str(usage.get("model") or "-")),
        ("problems", str(len(diag.get("problems", [])))),
    ]
    for key, value in rows:
        console.print(f"{key + ':':<15}", Text(value), sep="", soft_wrap=True)  # ids whole


@app.command()
def stop(
    project_dir: str = PROJECT_DIR,
    conversation_id: str = typer.Argument(..., help="the conversation to stop"),
    json_out: bool = JSON,
) -> None:
    """Stop a conversation: its LLM call and tool calls are cancelled and it is let go; its
    history stays, and starting it again (chat --conversation) carries on."""

    async def main() -> ConversationInfo:
        async with cli_bus("conversations") as bus:
            info = await resolve_project(bus, project_dir)
            return await ConversationsClient(bus, info.project_id).stop(conversation_id, reason="cli")

    stopped = run(main)
    if json_out:
        print_json(stopped)
        return
    console.print(f"stopped {stopped.conversation_id}")


@app.command()
def delete(
    project_dir: str = typer.Argument(..., help="the project's directory"),
    conversation_id: str = typer.Argument(..., help="the conversation to delete"),
    yes: bool = typer.Option(False, "--yes", "-y", help="do not ask for confirmation"),
    json_out: bool = typer.Option(False, "--json", help="print JSON"),
) -> None:
    """Delete a conversation for good: its journal, stored output and input, and its records.

    The journal is kept until a conversation is deleted (docs/deploy.md, "Retention and disk");
    its token usage stays in the project's totals.
    """
    if not yes and not typer.confirm(f"delete conversation {conversation_id} and its whole history?"):
        raise typer.Exit(1)

    async def main() -> ConversationDeleted:
        async with cli_bus("conversations") as bus:
            info = await resolve_project(bus, project_dir)
            return await ConversationsClient(bus, info.project_id).delete(conversation_id)

    gone = run(main)
    if json_out:
        print_json(gone)
        return
    console.print(
        f"deleted {gone.conversation_id}: {gone.journal_entries} journal entries, "
        f"{gone.events} stored events, {gone.inputs} inputs"
    )


@app.command()
def prune(
    project_dir: str = PROJECT_DIR,
    older_than: float | None = typer.Option(
        None,
        "--older-than",
        min=0.0,
        help="days since last activity (default: the settings' conversations.retention_days)",
    ),
    dry_run: bool = typer.Option(False, "--dry-run", help="only name what would be deleted"),
    json_out: bool = JSON,
) -> None:
    """Delete the conversations that ended (no replica runs them) and were last active more than
    ``--older-than`` days ago: their journal, stored output and input, records and token ledger.
    A running or recently active conversation is kept."""
    days = older_than if older_than is not None else _retention_days()

    async def main() -> ConversationsPruned:
        async with cli_bus("conversations") as bus:
            info = await resolve_project(bus, project_dir)
            return await ConversationsClient(bus, info.project_id).prune(days, dry_run=dry_run)

    pruned = run(main)
    if json_out:
        print_json(pruned)
        return
    verb = "would delete" if pruned.dry_run else "deleted"
    for conversation_id in pruned.conversation_ids:
        console.print(Text(f"{verb} {conversation_id}"), soft_wrap=True)
    console.print(f"{verb} {len(pruned.conversation_ids)} conversation(s) idle over {days:g} day(s)")


def _retention_days() -> float:
    """The user's ``conversations.retention_days``; exit 2 naming the option when it is unset."""
    from jidocode.shared.config import Config
    from jidocode.shared.settings import load_settings

    loaded = load_settings(None, jido_home=Config.from_env().jido_home, trusted=False)
    days = None if loaded.broken else loaded.settings.conversations.retention_days
    if days is None:
        console.print("[red]error:[/] give --older-than DAYS or set conversations.retention_days")
        raise typer.Exit(2)
    return days


@app.command("export")
def export(
    project_dir: str = typer.Argument(..., help="the project's directory"),
    conversation_id: str = typer.Argument(..., help="the conversation"),
    output: Path | None = typer.Option(None, "--output", "-o", help="the file (default: <id>.jsonl here)"),
) -> None:
    """Write a conversation's journal, the model's recorded answers and its projections to a
    recording (JSON lines; see docs/compaction-and-replay.md) for `jidocode replay`."""
    from .replay import export_command  # the replay's modules: only for an export

    export_command(project_dir, conversation_id, output)
