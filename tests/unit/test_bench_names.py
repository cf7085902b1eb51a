"""No bench script is named like an importable package (issue 27: ``bench/mcp.py`` shadowed ``mcp``).

``python bench/x.py`` puts ``bench/`` first on ``sys.path``: a script there named like a package
the services import (``mcp``) is imported in its place, and the benchmark breaks far from the
cause."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench"


def test_no_bench_script_shadows_an_installed_module(tmp_path: Path) -> None:
    stems = sorted(p.stem for p in BENCH.glob("*.py"))
    assert "mcp_server" in stems
    # a Python of this environment, isolated: neither the checkout nor bench/ on its path
    probe = (
        "import importlib.util, json, sys\n"
        "print(json.dumps({s: bool(importlib.util.find_spec(s)) for s in sys.argv[1:]}))"
    )
    found = subprocess.run(
        [sys.executable, "-I", "-c", probe, *stems], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert found.returncode == 0, found.stderr
    shadowed = sorted(name for name, importable in json.loads(found.stdout).items() if importable)
    assert shadowed == [], f"bench scripts named like importable modules: {shadowed}"
