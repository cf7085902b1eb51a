"""`jidocode doctor`: which OS sandbox tool commands run in here, and how to get the stronger one."""

from __future__ import annotations

import asyncio
import os
import subprocess
from pathlib import Path
from typing import Any

import typer

from jidocode.shared import sandbox
from jidocode.shared.errors import JidoError
from jidocode.shared.settings import global_home

from .common import console, print_json

__all__ = ["doctor", "sandbox_report"]


async def _try(root: str, jido_home: str) -> tuple[bool, str]:
    """Run ``echo ok`` the way the bash tool would, in ``root``."""
    try:
        launch = await sandbox.prepare(["/bin/sh", "-c", "echo ok"], root=root, jido_home=jido_home)
    except JidoError as exc:
        return False, exc.message
    try:
        done = await asyncio.to_thread(
            subprocess.run,
            launch.argv,
            cwd=launch.cwd,
            env=launch.env,
            pass_fds=launch.pass_fds,
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
    except (OSError, subprocess.SubprocessError) as exc:
        return False, str(exc)
    finally:
        await launch.close()
    out = (done.stdout + done.stderr).strip()
    return done.returncode == 0 and out == "ok", out


def sandbox_report(project: str | None = None, *, check: bool = True) -> dict[str, Any]:
    """What ``doctor`` prints, as data."""
    caps = sandbox.detect()
    home = str(global_home())
    root = os.path.realpath(project or os.getcwd())
    settings = sandbox.effective_settings(root, jido_home=home)
    choice = sandbox.choose(settings, caps)
    report: dict[str, Any] = {
        "sandbox": choice.mode,
        "sandboxed": choice.sandboxed,
        "reason": choice.reason,
        "hint": choice.hint,
        "network": choice.network,
        "settings": {
            "mode": settings.mode,
            "network": settings.network,
            "global": str(Path(home) / "settings.json"),
        },
        "bubblewrap": {
            "path": caps.bwrap,
            "problem": caps.bwrap_problem,
            "disable_userns": caps.bwrap_disable_userns,
        },
        "landlock": {"abi": caps.landlock_abi, "problem": caps.landlock_problem},
    }
    if check and choice.mode != "unavailable":
        ok, out = asyncio.run(_try(root, home))
        report["check"] = {"ok": ok, "output": out[-500:]}
    return report


def doctor(
    project: str = typer.Option(None, "--project", "-p", help="project directory (default: the current one)"),
    json_out: bool = typer.Option(False, "--json", help="print JSON"),
    no_check: bool = typer.Option(False, "--no-check", help="do not run a test command in the sandbox"),
) -> None:
    """Show which OS sandbox tool commands run in here, and how to get a stronger one."""
    report = sandbox_report(project, check=not no_check)
    if json_out:
        print_json(report)
    else:
        colour = {"bubblewrap": "green", "landlock": "yellow", "off": "red", "unavailable": "red"}[
            report["sandbox"]
        ]
        console.print(f"sandbox: [bold {colour}]{report['sandbox']}[/] — {report['reason']}", highlight=False)
        bw, ll = report["bubblewrap"], report["landlock"]
        console.print(
            f"  bubblewrap: {bw['path'] or 'no'}" + (f" ({bw['problem']})" if bw["problem"] else "")
        )
        console.print("  landlock:   " + (f"ABI {ll['abi']}" if ll["abi"] else f"no ({ll['problem']})"))
        console.print(
            f"  settings:   mode {report['settings']['mode']}, network "
            f"{'allowed' if report['network'] else 'off'} ({report['settings']['global']})"
        )
        if "check" in report:
            state = (
                "[green]ok[/]" if report["check"]["ok"] else f"[red]failed[/]: {report['check']['output']}"
            )
            console.print(f"  check:      {state}")
        if report["hint"]:
            console.print(f"stronger: {report['hint']}", highlight=False)
        if report["sandbox"] == "unavailable":
            console.print("[red]bash tool calls are refused until one of these is done.[/]")
    if report["sandbox"] == "unavailable" or not report.get("check", {"ok": True})["ok"]:
        raise typer.Exit(1)
