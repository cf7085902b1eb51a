"""`jidocode doctor` says which sandbox is active, why, and how to get bubblewrap when it is missing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from jidocode.cli.doctor import bubblewrap_install
from jidocode.shared import sandbox


@pytest.mark.parametrize(
    ("os_release", "first"),
    [
        ({"ID": "ubuntu", "ID_LIKE": "debian"}, "sudo apt install bubblewrap"),
        ({"ID": "arch"}, "sudo pacman -S bubblewrap"),
        ({"ID": "rocky", "ID_LIKE": "rhel centos fedora"}, "sudo dnf install bubblewrap"),
        ({"ID": "opensuse-tumbleweed", "ID_LIKE": "opensuse suse"}, "sudo zypper install bubblewrap"),
        ({"ID": "gentoo"}, "sudo apt install bubblewrap"),  # unknown: the list as it is
    ],
)
def test_the_distributions_own_package_command_comes_first(os_release: dict[str, str], first: str) -> None:
    commands = bubblewrap_install(os_release)
    assert commands[0].startswith(first), commands
    assert {c.split(" (")[0] for c in commands} >= {
        "sudo apt install bubblewrap",
        "sudo dnf install bubblewrap",
        "sudo pacman -S bubblewrap",
    }


def _doctor(tmp_path: Path, *argv: str) -> tuple[int, str]:
    """``jidocode doctor --no-check <argv>`` with no ``bwrap`` on PATH (the venv's tools only)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("NATS_")}
    env.update(
        PATH=str(Path(sys.executable).parent),
        JIDO_DATA_HOME=str(tmp_path / "data"),
        JIDO_CODE_HOME=str(tmp_path / "home"),
        COLUMNS="400",
    )
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "jidocode.cli.main",
            "doctor",
            "--no-check",
            "--project",
            str(tmp_path),
            *argv,
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    return done.returncode, done.stdout + done.stderr


def test_without_bubblewrap_doctor_names_landlock_and_how_to_get_bubblewrap(tmp_path: Path) -> None:
    if not sandbox.detect().landlock_abi:
        pytest.skip(f"Landlock is not available here: {sandbox.detect().landlock_problem}")
    assert not (Path(sys.executable).parent / "bwrap").exists()
    _, said = _doctor(tmp_path)
    line = next(x for x in said.splitlines() if x.startswith("sandbox:"))
    assert "landlock is active" in line and "no bwrap on PATH" in line, said
    get = next(x for x in said.splitlines() if x.strip().startswith("get it:"))
    for command in ("apt install bubblewrap", "dnf install bubblewrap", "pacman -S bubblewrap"):
        assert command in get, said
    _, out = _doctor(tmp_path, "--json")
    report = json.loads(out[out.index("{") :])
    assert report["sandbox"] == "landlock" and report["bubblewrap"]["path"] is None
    assert any("pacman -S bubblewrap" in c for c in report["bubblewrap"]["install"]), report["bubblewrap"]


def test_with_bubblewrap_doctor_says_it_is_active_and_offers_no_install(tmp_path: Path) -> None:
    caps = sandbox.detect()
    if not caps.bwrap:
        pytest.skip(f"bubblewrap cannot run here: {caps.bwrap_problem}")
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "jidocode.cli.main",
            "doctor",
            "--no-check",
            "--json",
            "--project",
            str(tmp_path),
        ],
        env={
            **{k: v for k, v in os.environ.items() if not k.startswith("NATS_")},
            "JIDO_DATA_HOME": str(tmp_path / "data"),
            "JIDO_CODE_HOME": str(tmp_path / "home"),
        },
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    report = json.loads(done.stdout)
    assert report["sandbox"] == "bubblewrap" and report["bubblewrap"]["install"] == [], report
