"""The quality service (seed 004): run the check commands in the sandbox, report each result.

STUB (interface fixed; the ``prd-gitq`` branch implements it).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence

from jidocode.shared.events.prd import CheckOutcome

__all__ = ["OnOutput", "QualityReport", "run_checks"]

#: Called with (command, chunk of output) as a check runs.
OnOutput = Callable[[str, str], Awaitable[None]]


class QualityReport:
    def __init__(self, checks: list[CheckOutcome]) -> None:
        self.checks = checks

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.checks)


async def run_checks(
    work_dir: str,
    commands: Sequence[str],
    *,
    timeout_s: float = 600.0,
    output_cap: int = 65536,
    on_output: OnOutput | None = None,
    additional_directories: Sequence[str] = (),
) -> QualityReport:
    """Each command with ``bash -c`` in ``work_dir`` under :func:`jidocode.shared.sandbox.prepare`,
    in order, all of them (a failing check does not skip the next)."""
    raise NotImplementedError
