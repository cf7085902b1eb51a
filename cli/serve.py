"""``jidocode serve <name>``: run one service in this process until SIGTERM/SIGINT.

The signal handling, supervisor watch and exit codes are
:mod:`jidocode.shared.runner` (each service's ``__main__`` uses it too);
this module only finds the service by name.
"""

from __future__ import annotations

import sys

from jidocode.services.registry import load_serve
from jidocode.shared import runner
from jidocode.shared.runner import configure_logging

__all__ = ["configure_logging", "run_service"]


def run_service(name: str) -> None:
    """Run the service ``name`` (``ValueError`` for an unknown one)."""
    runner.run_service(name, load_serve(name))


if __name__ == "__main__":
    run_service(sys.argv[1])
