"""`jidocode checkpoints list|diff|restore <project-dir> …`: a project's checkpoints outside a chat.

The tool runner records one checkpoint of the project's files per conversation turn, before the
turn's first call that can write (docs/checkpoints.md). ``list`` shows them (of one conversation
when named), ``diff`` what restoring one would change and which of those files somebody else
changed since, ``restore`` shows that diff, asks (``--yes`` for scripts) and puts the files back;
files changed since by the user are kept unless ``--overwrite-user-changes``.

Labels and paths come from the project and the model: untrusted text, shown with every control
character escaped, never as markup.
"""

from __future__ import annotations

import sys
import time
from typing import Final

import typer
from rich import box
from rich.table import Table
from rich.text import Text

from jidocode.shared.clients import ToolsClient
from jidocode.shared.errors import InvalidInput
from jidocode.shared.events.tools import CheckpointDiff, CheckpointList, CheckpointRestored

from .common import cli_bus, console, fields, print_json, resolve_project, run

__all__ = ["app", "diff_lines", "shown"]

app = typer.Typer(
    rich_markup_mode=None,
    help="A project's checkpoints (one per conversation turn): list, diff, restore.",
    no_args_is_help=True,
)

DATA_DIR = typer.Option(".jido", "--data-dir", help="the project's data dir, relative to its root")
JSON_OUT = typer.Option(False, "--json", help="print the reply as JSON")
#: Seconds a request waits (a restore or diff reads the whole work tree).
TIMEOUT_S: Final = 120.0


def shown(text: str) -> str:
    """``text`` with every character that is not printable escaped (a path or label may hold
    terminal escape sequences)."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def diff_lines(diff: CheckpointDiff) -> list[str]:
    """The diff as lines: ``+`` made again, ``~`` written back, ``-`` deleted; ``!`` user-changed."""
    by_user = set(diff.changed_by_user)
    out: list[str] = []
    for mark, paths in (("+", diff.added), ("~", diff.modified), ("-", diff.deleted)):
        for path in paths:
            flag = "  (changed since by the user)" if path in by_user else ""
            out.append(f"{mark} {shown(path)}{flag}")
    return out


def _when(created_at: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(created_at))


def _table(found: CheckpointList) -> Table:
    table = Table(box=box.SIMPLE_HEAD, show_edge=False)
    for name in ("checkpoint", "recorded", "conversation", "files", "left out", "message"):
        table.add_column(name, overflow="fold")
    for c in found.checkpoints:
        table.add_row(
            c.id,
            _when(c.created_at),
            Text(shown(c.conversation_id)),
            str(c.files),
            str(len(c.skipped)),
            Text(shown(c.label)),
        )
    return table


@app.command("list")
def list_(
    project_dir: str = typer.Argument(..., help="the project's directory"),
    conversation: str | None = typer.Argument(None, help="only this conversation's checkpoints"),
    json_out: bool = JSON_OUT,
    data_dir: str = DATA_DIR,
) -> None:
    """The project's checkpoints, oldest first: id, time, conversation, files, message."""

    async def main() -> CheckpointList:
        async with cli_bus() as bus:
            info = await resolve_project(bus, project_dir, data_dir=data_dir)
            return await ToolsClient(bus, info.project_id, timeout=TIMEOUT_S).checkpoints_list(conversation)

    found = run(main)
    if json_out:
        print_json(fields(found))
    elif found.checkpoints:
        console.print(_table(found))
    else:
        typer.echo("no checkpoints", err=True)


async def _diff(project_dir: str, checkpoint: str, data_dir: str) -> CheckpointDiff:
    async with cli_bus() as bus:
        info = await resolve_project(bus, project_dir, data_dir=data_dir)
        return await ToolsClient(bus, info.project_id, timeout=TIMEOUT_S).checkpoints_diff(checkpoint)


def _print_diff(diff: CheckpointDiff) -> None:
    c = diff.checkpoint
    typer.echo(f"checkpoint {c.id} of {_when(c.created_at)}: {shown(c.label)}")
    lines = diff_lines(diff)
    for line in lines:
        typer.echo(line)
    if not lines:
        typer.echo("the work tree already matches it")


@app.command("diff")
def diff(
    project_dir: str = typer.Argument(..., help="the project's directory"),
    checkpoint: str = typer.Argument(..., help="the checkpoint's id (`jidocode checkpoints list`)"),
    json_out: bool = JSON_OUT,
    data_dir: str = DATA_DIR,
) -> None:
    """What restoring the checkpoint would change: + made again, ~ written back, - deleted."""
    found = run(lambda: _diff(project_dir, checkpoint, data_dir))
    if json_out:
        print_json(fields(found))
    else:
        _print_diff(found)


@app.command("restore")
def restore(
    project_dir: str = typer.Argument(..., help="the project's directory"),
    checkpoint: str = typer.Argument(..., help="the checkpoint's id (`jidocode checkpoints list`)"),
    paths: list[str] | None = typer.Option(None, "--path", help="restore only this path (repeatable)"),
    overwrite: bool = typer.Option(
        False, "--overwrite-user-changes", help="also put back files changed since by the user"
    ),
    yes: bool = typer.Option(False, "--yes", "-y", help="do not ask (for scripts)"),
    json_out: bool = JSON_OUT,
    data_dir: str = DATA_DIR,
) -> None:
    """Show the diff, ask, then put the project's files back as the checkpoint holds them."""
    if not yes:
        found = run(lambda: _diff(project_dir, checkpoint, data_dir))
        _print_diff(found)
        if not (found.added or found.modified or found.deleted):
            return
        if not sys.stdin.isatty():
            run(_refuse)
        if not typer.confirm("restore these files?", default=False):
            typer.echo("nothing restored", err=True)
            raise typer.Exit(1)

    async def main() -> CheckpointRestored:
        async with cli_bus() as bus:
            info = await resolve_project(bus, project_dir, data_dir=data_dir)
            tools = ToolsClient(bus, info.project_id, timeout=TIMEOUT_S)
            return await tools.checkpoints_restore(checkpoint, paths=paths, overwrite_user_changes=overwrite)

    done = run(main)
    if json_out:
        print_json(fields(done))
        return
    typer.echo(f"restored {len(done.restored)} path(s) from checkpoint {done.checkpoint.id}")
    for path in done.kept:
        typer.echo(f"kept (changed since by the user): {shown(path)}")


async def _refuse() -> None:
    raise InvalidInput("not restoring without a terminal to ask on: pass --yes to restore from a script")
