"""The ``jidocode`` command line.

Every command is listed in :mod:`jidocode.cli.commands` with its one-line help and imported
only when it runs (:mod:`jidocode.cli.lazy`): ``jidocode --help`` imports typer and nothing of
the commands, and a command pays only for what it uses (decision 0312).
"""

from __future__ import annotations

import typer

from .commands import TABLE
from .lazy import LazyCommand, LazyGroup

__all__ = ["COMMANDS", "app"]

#: The commands in ``--help`` order (the table is :data:`jidocode.cli.commands.TABLE`).
COMMANDS: tuple[LazyCommand, ...] = tuple(
    LazyCommand(name, f"jidocode.cli.{target}", help) for name, target, help in TABLE
)


class _Commands(LazyGroup):
    table = COMMANDS


app = typer.Typer(
    rich_markup_mode=None,
    name="jidocode",
    help="JidoCode: a multi-project coding-assistant runtime over NATS.",
    no_args_is_help=True,
    add_completion=False,
    cls=_Commands,
)


@app.callback()
def _jidocode() -> None:
    """JidoCode: a multi-project coding-assistant runtime over NATS."""


if __name__ == "__main__":
    app()
