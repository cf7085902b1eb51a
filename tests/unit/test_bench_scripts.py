"""Every bench script runs as its docs say: ``python bench/x.py`` (issue 27: ``bench/mcp.py`` shadowed ``mcp``).

``python bench/x.py`` puts ``bench/`` first on ``sys.path``: a script there named like a package
the services import (``mcp``) is imported in its place, and the benchmark breaks far from the
cause. So no script (nor a folder of the checkout's root, which is on the path of the tests and
of the scripts that import ``tests.*``) is named like an importable module, and each script's
``--help`` runs: it imports everything the script imports, as a script, from outside the checkout."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "bench"
SCRIPTS = sorted(BENCH.glob("*.py"))


def _top_level_names() -> list[str]:
    """What the checkout's root offers as top-level modules when it is on ``sys.path`` (the test
    run, and the bench scripts that import ``tests.*``): its folders and ``.py`` files."""
    return sorted(
        p.stem
        for p in ROOT.iterdir()
        if not p.name.startswith(".") and ((p.is_dir() and p.name.isidentifier()) or p.suffix == ".py")
    )


def test_no_bench_script_or_top_folder_shadows_an_installed_module(tmp_path: Path) -> None:
    stems = [p.stem for p in SCRIPTS]
    assert "mcp_server" in stems
    stems += [
        name for name in _top_level_names() if name != "setup"
    ]  # setup.py: pip runs it, none imports it
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
    assert shadowed == [], f"bench scripts or checkout folders named like importable modules: {shadowed}"


@pytest.mark.parametrize("script", SCRIPTS, ids=[p.name for p in SCRIPTS])
def test_every_bench_script_answers_help(script: Path, tmp_path: Path) -> None:
    # from another folder, as `python bench/x.py --help`: only what the script sets up is on its path
    ran = subprocess.run(
        [sys.executable, str(script), "--help"], cwd=tmp_path, capture_output=True, text=True, timeout=300
    )
    assert ran.returncode == 0, f"{script.name} --help exited {ran.returncode}:\n{ran.stderr[-3000:]}"
    assert ran.stdout.startswith("usage:"), f"{script.name} --help printed no usage:\n{ran.stdout[:500]}"
