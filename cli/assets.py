"""`jidocode assets list|show|reload|search|diagnostics` over the running asset loader.

Each command finds (or starts) the project of ``<project-dir>`` through the
engine, then asks ``jido.assets.<p>.<verb>``. Diagnostics (files that could
not be loaded, and why) are printed after the listing, on stderr; ``--json``
prints one JSON document on stdout instead.
"""

from __future__ import annotations

from typing import Any

import typer
from rich.table import Table

from jidocode.shared import subjects
from jidocode.shared.bus import Bus
from jidocode.shared.events import EventModel
from jidocode.shared.events.assets import GetAsset, GetDiagnostics, ListAssets, ReloadAssets, SearchAssets

from .common import cli_bus, console, err_console, print_json, resolve_project, run

__all__ = ["app"]

app = typer.Typer(help="Skills, commands and workflows of a project.", no_args_is_help=True)

JSON = typer.Option(False, "--json", help="print JSON")
DATA_DIR = typer.Option(".jido", "--data-dir", help="the project's data dir, relative to its root")
_TYPES = ("skill", "command", "workflow")


def _check_type(kind: str | None) -> str | None:
    if kind is not None and kind not in _TYPES:
        raise typer.BadParameter(f"expected one of {', '.join(_TYPES)}", param_hint="--type")
    return kind


async def _ask(bus: Bus, project_dir: str, data_dir: str, verb: str, body: EventModel) -> tuple[str, Any]:
    info = await resolve_project(bus, project_dir, data_dir=data_dir)
    pid = str(info["project_id"])
    return pid, await bus.request(subjects.assets(pid, verb), body, timeout=30.0)


def _print_diagnostics(diagnostics: list[dict[str, Any]]) -> None:
    if not diagnostics:
        return
    err_console.print(f"[bold]{len(diagnostics)} diagnostic(s)[/]", highlight=False)
    for d in diagnostics:
        colour = "red" if d.get("severity") == "error" else "yellow"
        key = f" [{d['key']}]" if d.get("key") else ""
        err_console.print(
            f"[{colour}]{d.get('severity', 'error')}[/] {d['file']}{key}: {d['problem']}", highlight=False
        )


def _table(items: list[dict[str, Any]], *, score: bool = False) -> None:
    table = Table("type", "name", "description", "layer", *(["score"] if score else []))
    for item in items:
        row = [item["type"], item["name"], (item.get("description") or "")[:80], item.get("layer", "")]
        if score:
            row.append(f"{item.get('score', 0):.2f}")
        table.add_row(*row)
    console.print(table)


@app.command("list")
def list_(
    project_dir: str = typer.Argument(..., help="the project's directory"),
    kind: str | None = typer.Option(None, "--type", help="skill, command or workflow"),
    data_dir: str = DATA_DIR,
    json_out: bool = JSON,
) -> None:
    """List the assets of a project (project layer over the global one)."""
    _check_type(kind)

    async def main() -> tuple[Any, Any]:
        async with cli_bus() as bus:
            pid, items = await _ask(bus, project_dir, data_dir, "list", ListAssets(kind=kind))  # type: ignore[arg-type]
            diags = await bus.request(subjects.assets(pid, "diagnostics"), GetDiagnostics())
            return items, diags

    items, diags = run(main)
    if json_out:
        print_json({"assets": items, "diagnostics": diags["diagnostics"]})
        return
    _table(items)
    _print_diagnostics(diags["diagnostics"])


@app.command()
def show(
    project_dir: str = typer.Argument(..., help="the project's directory"),
    kind: str = typer.Argument(..., help="skill, command or workflow"),
    name: str = typer.Argument(...),
    data_dir: str = DATA_DIR,
    json_out: bool = JSON,
) -> None:
    """Show one asset: its metadata and body."""
    if kind not in _TYPES:
        raise typer.BadParameter(f"expected one of {', '.join(_TYPES)}", param_hint="type")

    async def main() -> Any:
        async with cli_bus() as bus:
            return (await _ask(bus, project_dir, data_dir, "get", GetAsset(kind=kind, name=name)))[1]  # type: ignore[arg-type]

    asset = run(main)
    if json_out:
        print_json(asset)
        return
    console.print(f"[bold]{asset['type']} {asset['name']}[/]  ({asset.get('layer')}: {asset.get('path')})")
    if asset.get("description"):
        console.print(asset["description"], highlight=False)
    for key in ("version", "allowed_tools", "model", "argument_hint"):
        if asset.get(key):
            console.print(f"{key}: {asset[key]}", highlight=False)
    if asset.get("router"):
        for route in asset["router"]:
            console.print(f"route {route['path']} -> {route['action']}", highlight=False)
    if asset.get("steps"):
        for step in asset["steps"]:
            console.print(f"step {step['id']}: {step['kind']} {step['target']}", highlight=False)
    body = asset.get("body") or asset.get("template") or ""
    if body:
        console.print()
        console.print(body, highlight=False, markup=False)


@app.command()
def reload(
    project_dir: str = typer.Argument(..., help="the project's directory"),
    data_dir: str = DATA_DIR,
    json_out: bool = JSON,
) -> None:
    """Reload a project's assets now; print the counts and diagnostics."""

    async def main() -> Any:
        async with cli_bus() as bus:
            return (await _ask(bus, project_dir, data_dir, "reload", ReloadAssets()))[1]

    report = run(main)
    if json_out:
        print_json(report)
        return
    counts = ", ".join(f"{n} {k}(s)" for k, n in report["counts"].items())
    console.print(f"generation {report['generation']}: {counts}")
    _print_diagnostics(report["diagnostics"])


@app.command()
def search(
    project_dir: str = typer.Argument(..., help="the project's directory"),
    query: str = typer.Argument(...),
    kind: str | None = typer.Option(None, "--type", help="skill, command or workflow"),
    limit: int = typer.Option(20, min=1, max=100),
    data_dir: str = DATA_DIR,
    json_out: bool = JSON,
) -> None:
    """Fuzzy search over names and descriptions."""
    _check_type(kind)

    async def main() -> Any:
        async with cli_bus() as bus:
            body = SearchAssets(query=query, kind=kind, limit=limit)  # type: ignore[arg-type]
            return (await _ask(bus, project_dir, data_dir, "search", body))[1]

    hits = run(main)
    if json_out:
        print_json(hits)
        return
    _table(hits, score=True)


@app.command()
def diagnostics(
    project_dir: str = typer.Argument(..., help="the project's directory"),
    data_dir: str = DATA_DIR,
    json_out: bool = JSON,
) -> None:
    """Only the diagnostics of the current generation."""

    async def main() -> Any:
        async with cli_bus() as bus:
            return (await _ask(bus, project_dir, data_dir, "diagnostics", GetDiagnostics()))[1]

    report = run(main)
    if json_out:
        print_json(report)
        return
    if not report["diagnostics"]:
        console.print("no diagnostics")
    _print_diagnostics(report["diagnostics"])
