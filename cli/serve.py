"""``jidocode serve <name>``: run one service in this process until SIGTERM/SIGINT.

The signal handling, supervisor watch and exit codes are
:mod:`jidocode.shared.runner` (each service's ``__main__`` uses it too);
this module only finds the service by name.
"""

from __future__ import annotations

import sys

import typer

from jidocode.services.registry import load_serve
from jidocode.shared import runner
from jidocode.shared.runner import configure_logging

__all__ = ["configure_logging", "run_service", "serve"]


def run_service(name: str) -> None:
    """Run the service ``name`` (``ValueError`` for an unknown one)."""
    runner.run_service(name, load_serve(name))


def serve(
    name: str = typer.Argument(..., help="a service (engine, project, ...) or gateway"),
) -> None:
    """Run one service in the foreground (what containers run)."""
    run_service(name.replace("-", "_"))


if __name__ == "__main__":
    run_service(sys.argv[1])
