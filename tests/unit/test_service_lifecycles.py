"""Every service runs the one lifecycle and takes the project id from its host (issue 27 point 6).

Seven ``serve()`` functions each connected, started, waited, drained and closed by hand, and 26
handlers read the project id off the envelope themselves. Now each ``serve()`` is one
``ServiceLifecycle`` and a per-project handler is handed the id (``ServiceHost.serve_project``):
a service that goes back to the hand-written way fails here, naming the file."""

from __future__ import annotations

import ast
from pathlib import Path

from jidocode.services.registry import RUNNABLE

ROOT = Path(__file__).resolve().parents[2]
#: Where reading the subject's project id by hand is right: not an endpoint (a routed signal).
_NOT_ENDPOINTS = {("services/asset_loader/service.py", "on_skill_signal")}


def _calls(tree: ast.AST) -> list[tuple[str, str]]:
    """``(enclosing function, dotted callee)`` of every call in ``tree``."""
    found: list[tuple[str, str]] = []

    def visit(node: ast.AST, function: str) -> None:
        for child in ast.iter_child_nodes(node):
            inner = child.name if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef) else function
            if isinstance(child, ast.Call):
                found.append((function, ast.unparse(child.func)))
            visit(child, inner)

    visit(tree, "")
    return found


def test_every_serve_runs_one_service_lifecycle() -> None:
    for name in RUNNABLE:
        path = ROOT / "services" / name / "service.py"
        calls = _calls(ast.parse(path.read_text(encoding="utf-8")))
        assert ("serve", "ServiceLifecycle") in calls, (
            f"{path.relative_to(ROOT)}: serve() runs no ServiceLifecycle"
        )
        connects = [c for c in calls if c[1] == "Bus.connect"]
        assert connects == [], f"{path.relative_to(ROOT)} connects by hand in {connects}"


def test_no_endpoint_handler_reads_the_project_id_by_hand() -> None:
    by_hand = sorted(
        (str(path.relative_to(ROOT)), function)
        for path in (ROOT / "services").rglob("*.py")
        for function, callee in _calls(ast.parse(path.read_text(encoding="utf-8")))
        if callee.endswith("scoped_project_id")
    )
    assert set(by_hand) <= _NOT_ENDPOINTS, f"handlers reading the project id by hand: {by_hand}"
