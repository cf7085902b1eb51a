"""The policy's, the settings' and the bus contract's rooms stay within issue 27's limits.

No production file over 600 lines, no function over 80, ruff's complexity (``C90``) at most 12
and ``SIM`` clean: the shell analysis and the policy are attacked by tests/security, so they are
read by people, in rooms small enough to read (the walk, its words, its wrappers; which words
name files; one path's judgement; the settings' model, layers and trust rules; the NATS users
and their JetStream grants; the AsyncAPI document's channels).
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

import jidocode.shared as shared
import jidocode.shared.policy as policy

_SHARED = Path(shared.__file__).parent
_ROOMS = (
    *sorted(Path(policy.__file__).parent.glob("*.py")),
    *sorted(_SHARED.glob("settings*.py")),
    _SHARED / "nats_permissions.py",
    _SHARED / "nats_grants.py",
    _SHARED / "contract" / "asyncapi.py",
)


def _long_functions(source: str) -> list[str]:
    return [
        f"{node.name} ({node.end_lineno - node.lineno + 1} lines)"
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and node.end_lineno is not None
        and node.end_lineno - node.lineno + 1 > 80
    ]


@pytest.mark.parametrize("room", _ROOMS, ids=lambda p: p.relative_to(_SHARED).as_posix())
def test_a_room_keeps_within_the_size_limits(room: Path) -> None:
    source = room.read_text()
    lines = len(source.splitlines())
    assert lines <= 600, f"{room.name} has {lines} lines (at most 600)"
    long = _long_functions(source)
    assert not long, f"{room.name}: functions over 80 lines: {long}"


def test_the_rooms_are_simple_enough_for_ruff() -> None:
    """``C90`` at complexity 12 and ``SIM``, as the issue turns them on for the whole tree."""
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "ruff",
            "check",
            "--no-cache",
            "--select",
            "C90,SIM",
            "--config",
            "lint.mccabe.max-complexity=12",
            *map(str, _ROOMS),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert run.returncode == 0, run.stdout + run.stderr
