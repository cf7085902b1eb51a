"""The Dockerfile's contract, checked statically (no Docker engine needed): non-root, jidocode as the
entrypoint behind an init that forwards SIGTERM, a probe health check, and build inputs that exist."""

from __future__ import annotations

import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _instructions() -> list[tuple[str, str]]:
    text = (ROOT / "Dockerfile").read_text().replace("\\\n", " ")
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            out.append((word.upper(), rest.strip()))
    return out


def test_base_image_is_a_slim_supported_python() -> None:
    arg = next(rest for word, rest in _instructions() if word == "ARG" and rest.startswith("PYTHON_IMAGE="))
    match = re.fullmatch(r"PYTHON_IMAGE=python:3\.(\d+)-slim(-\w+)?", arg)
    assert match and int(match.group(1)) >= 11


def test_runs_jidocode_as_non_root_with_an_init_for_signals() -> None:
    ins = _instructions()
    runtime = ins[max(i for i, (w, r) in enumerate(ins) if w == "FROM") :]
    users = [rest for word, rest in runtime if word == "USER"]
    assert users and not users[-1].startswith(("0", "root"))
    assert json.loads(next(r for w, r in runtime if w == "ENTRYPOINT")) == ["tini", "--", "jidocode"]
    assert json.loads(next(r for w, r in runtime if w == "CMD")) == ["serve", "engine"]
    assert next(r for w, r in runtime if w == "STOPSIGNAL") == "SIGTERM"
    health = next(r for w, r in runtime if w == "HEALTHCHECK")
    assert "jidocode probe" in health


def test_copied_sources_exist_and_are_not_docker_ignored() -> None:
    ignored = {
        line.strip()
        for line in (ROOT / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    }
    for word, rest in _instructions():
        if word == "COPY" and not rest.startswith("--"):
            *sources, _dest = rest.split()
            for src in sources:
                name = src.rstrip("/").rstrip("*")
                assert name not in ignored, src
                if not src.endswith("*"):
                    assert (ROOT / name).exists(), src
    assert {".env", ".venv", ".git", "tests"} <= ignored
