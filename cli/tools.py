"""`jidocode tools …` commands. Owned by the work on this area; the lead's cli/main.py mounts `app`."""

from __future__ import annotations

import typer

app = typer.Typer(help="tools commands", no_args_is_help=True)
