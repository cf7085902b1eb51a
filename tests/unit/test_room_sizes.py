"""Small rooms: no production file over 600 lines, no function over 80 (issue 27).

Every ``.py`` under ``shared/``, ``services/``, ``client/`` and ``cli/`` is parsed with
:mod:`ast`. Complexity (mccabe, 12) and ruff's ``SIM`` rules are part of ``./dev check``
(``pyproject.toml``); these two limits are not ruff rules, so they are checked here. A room that
grows past them is split by responsibility (``docs/architecture.md`` has the room map), not
cut in halves.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FOLDERS = ("shared", "services", "client", "cli")
MAX_FILE_LINES = 600
MAX_FUNCTION_LINES = 80


def _production_files() -> list[Path]:
    return sorted(
        path
        for folder in FOLDERS
        for path in (ROOT / folder).rglob("*.py")
        if "__pycache__" not in path.parts
    )


def test_the_rooms_are_found() -> None:
    files = _production_files()
    assert len(files) > 200, files  # the folders moved, or the walk finds nothing to check
    assert ROOT / "services" / "conversation" / "runtime.py" in files


def test_no_production_file_is_over_600_lines() -> None:
    too_long = {
        str(path.relative_to(ROOT)): lines
        for path in _production_files()
        if (lines := path.read_text(encoding="utf-8").count("\n")) > MAX_FILE_LINES
    }
    assert too_long == {}


def test_no_function_is_over_80_lines() -> None:
    too_long: dict[str, int] = {}
    for path in _production_files():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                lines = (node.end_lineno or node.lineno) - node.lineno + 1
                if lines > MAX_FUNCTION_LINES:
                    too_long[f"{path.relative_to(ROOT)}:{node.lineno} {node.name}"] = lines
    assert too_long == {}
