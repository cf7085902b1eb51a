"""Every bench script runs as its docs say: ``python bench/x.py`` (issue 27: ``bench/mcp.py`` shadowed ``mcp``).

``python bench/x.py`` puts ``bench/`` first on ``sys.path``: a script there named like a package
the services import (``mcp``) is imported in its place, and the benchmark breaks far from the
cause. So no script is named like an importable module, and each one's ``--help`` runs: it
imports everything the script imports, as a script, from outside the checkout."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
SCRIPTS = sorted(BENCH.glob("*.py"))


def test_no_bench_script_shadows_an_installed_module(tmp_path: Path) -> None:
    stems = [p.stem for p in SCRIPTS]
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


@pytest.mark.parametrize("script", SCRIPTS, ids=[p.name for p in SCRIPTS])
def test_every_bench_script_answers_help(script: Path, tmp_path: Path) -> None:
    # from another folder, as `python bench/x.py --help`: only what the script sets up is on its path
    ran = subprocess.run(
        [sys.executable, str(script), "--help"], cwd=tmp_path, capture_output=True, text=True, timeout=300
    )
    assert ran.returncode == 0, f"{script.name} --help exited {ran.returncode}:\n{ran.stderr[-3000:]}"
    assert ran.stdout.startswith("usage:"), f"{script.name} --help printed no usage:\n{ran.stdout[:500]}"
