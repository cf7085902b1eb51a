"""`jidocode chat` — owned by the LLM/client work (issue 6). cli/main.py mounts ``chat`` as a command."""

from __future__ import annotations

import typer


def chat(project_dir: str = typer.Argument(..., help="the project directory")) -> None:
    """Chat with the assistant in a project (not available yet)."""
    raise typer.Exit(code=2)
