"""An npm package for the JS SDK contract tests: named by a variable, or installed once into a
temporary folder; without node, npm or a registry, a skip saying why."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

__all__ = ["node_with_package"]

INSTALL_TIMEOUT_S = 600


def _install(spec: str, into: Path) -> str | None:
    """npm-install ``spec`` (``name@range``) into ``into``; ``None``, or why it could not."""
    npm = shutil.which("npm")
    if npm is None:
        return "npm is not installed"
    try:
        done = subprocess.run(
            [npm, "install", "--no-audit", "--no-fund", "--prefix", str(into), spec],
            capture_output=True,
            text=True,
            timeout=INSTALL_TIMEOUT_S,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return f"npm install {spec} took more than {INSTALL_TIMEOUT_S} s"
    if done.returncode != 0:
        return f"npm install {spec} failed: {done.stderr.strip()[-500:]}"
    return None


def node_with_package(
    spec: str, env_var: str, tmp_path_factory: pytest.TempPathFactory, what: str
) -> tuple[str, Path]:
    """``(node, node_modules)`` holding ``spec``'s package: the folder ``env_var`` names, else a
    fresh install; a skip naming what is missing (``what``: the SDK, in the messages)."""
    node = shutil.which("node")
    if node is None:
        pytest.skip(f"node is not installed: the {what} tests need it")
    package = spec.rsplit("@", 1)[0]
    given = os.environ.get(env_var)
    if given:
        modules = Path(given)
    else:
        into = tmp_path_factory.mktemp(package.strip("@").replace("/", "-"))
        why = _install(spec, into)
        if why is not None:
            pytest.skip(f"the {what} is not available: {why}")
        modules = into / "node_modules"
    if not (modules / package / "package.json").is_file():
        pytest.skip(f"no {package} under {modules}")
    return node, modules
