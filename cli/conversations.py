"""``jidocode conversations …``: a project's conversations (delete; more verbs to come)."""

from __future__ import annotations

import typer

from jidocode.shared.clients import ConversationsClient
from jidocode.shared.events.conversation import ConversationDeleted

from .common import cli_bus, console, print_json, resolve_project, run

__all__ = ["app"]

app = typer.Typer(help="A project's conversations.", no_args_is_help=True)


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
