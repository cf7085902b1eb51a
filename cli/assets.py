"""`jidocode assets list|show|reload|search|diagnostics` over the running asset loader.

Each command finds (or starts) the project of ``<project-dir>`` through the
engine, then asks the asset loader (``AssetsClient``). Diagnostics (files that could
not be loaded, and why) are printed after the listing, on stderr; ``--json``
prints one JSON document on stdout instead.
"""

from __future__ import annotations

from typing import Any, cast

import typer
from rich.markup import escape
from rich.table import Table

from jidocode.shared.bus import Bus
from jidocode.shared.clients import AssetsClient
from jidocode.shared.events.assets import AssetReport, AssetType

from .common import cli_bus, console, err_console, fields, print_json, resolve_project, run

__all__ = ["app"]

app = typer.Typer(
    rich_markup_mode=None, help="Skills, commands and workflows of a project.", no_args_is_help=True
)

JSON = typer.Option(False, "--json", help="print JSON")
DATA_DIR = typer.Option(".jido", "--data-dir", help="the project's data dir, relative to its root")
_TYPES = ("skill", "command", "workflow")


def _check_type(kind: str | None, param_hint: str = "--type") -> AssetType | None:
    if kind is not None and kind not in _TYPES:
        raise typer.BadParameter(f"expected one of {', '.join(_TYPES)}", param_hint=param_hint)
    return cast(AssetType | None, kind)


async def _assets(bus: Bus, project_dir: str, data_dir: str) -> AssetsClient:
    """The asset loader's client for the project of ``project_dir`` (a reload may take a while)."""
    info = await resolve_project(bus, project_dir, data_dir=data_dir)
    return AssetsClient(bus, info.project_id, timeout=30.0)


def _print_diagnostics(diagnostics: list[dict[str, Any]]) -> None:
    if not diagnostics:
        return
    err_console.print(f"[bold]{len(diagnostics)} diagnostic(s)[/]", highlight=False)
    for d in diagnostics:
        colour = "red" if d.get("severity") == "error" else "yellow"
        key = f" [{d['key']}]" if d.get("key") else ""
        where = f"{d['file']}:{d['line']}:{d.get('column') or 1}" if d.get("line") else d["file"]
        said = escape(f"{where}{key}: {d['problem']}")  # file names and problems quote project text
        err_console.print(f"[{colour}]{escape(str(d.get('severity', 'error')))}[/] {said}", highlight=False)


def _table(items: list[dict[str, Any]], *, score: bool = False) -> None:
    table = Table("type", "name", "description", "layer", *(["score"] if score else []))
    for item in items:
        row = [
            escape(str(cell))  # names and descriptions are project text, never rich markup
            for cell in (
                item["type"],
                item["name"],
                (item.get("description") or "")[:80],
                item.get("layer", ""),
            )
        ]
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
    asset_type = _check_type(kind)

    async def main() -> tuple[list[dict[str, Any]], AssetReport]:
        async with cli_bus() as bus:
            assets = await _assets(bus, project_dir, data_dir)
            return (await assets.list(asset_type)).items, await assets.diagnostics()

    items, diags = run(main)
    if json_out:
        print_json({"assets": items, "diagnostics": diags.diagnostics})
        return
    _table(items)
    _print_diagnostics(diags.diagnostics)


@app.command()
def show(
    project_dir: str = typer.Argument(..., help="the project's directory"),
    kind: str = typer.Argument(..., help="skill, command or workflow"),
    name: str = typer.Argument(...),
    data_dir: str = DATA_DIR,
    json_out: bool = JSON,
) -> None:
    """Show one asset: its metadata and body."""
    asset_type = _check_type(kind, "type")
    assert asset_type is not None

    async def main() -> dict[str, Any]:
        async with cli_bus() as bus:
            return (await (await _assets(bus, project_dir, data_dir)).get(asset_type, name)).asset

    asset = run(main)
    if json_out:
        print_json(asset)
        return
    title = escape(f"{asset['type']} {asset['name']}")
    where = escape(f"({asset.get('layer')}: {asset.get('path')})")
    console.print(f"[bold]{title}[/]  {where}")
    lines = [asset["description"]] if asset.get("description") else []
    lines += [
        f"{key}: {asset[key]}"
        for key in ("version", "allowed_tools", "model", "argument_hint")
        if asset.get(key)
    ]
    lines += [f"route {route['path']} -> {route['action']}" for route in asset.get("router") or []]
    lines += [f"step {step['id']}: {step['kind']} {step['target']}" for step in asset.get("steps") or []]
    for line in lines:  # every field is project text: printed as it is, never as rich markup
        console.print(line, highlight=False, markup=False)
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

    async def main() -> AssetReport:
        async with cli_bus() as bus:
            return await (await _assets(bus, project_dir, data_dir)).reload()

    report = run(main)
    if json_out:
        # {generation, loaded_at, root, counts, diagnostics}: the settings files come with `diagnostics`
        print_json(fields(report, exclude=frozenset({"settings_files"})))
        return
    counts = ", ".join(f"{n} {k}(s)" for k, n in report.counts.items())
    console.print(f"generation {report.generation}: {counts}")
    _print_diagnostics(report.diagnostics)


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
    asset_type = _check_type(kind)

    async def main() -> list[dict[str, Any]]:
        async with cli_bus() as bus:
            assets = await _assets(bus, project_dir, data_dir)
            return (await assets.search(query, kind=asset_type, limit=limit)).items

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

    async def main() -> AssetReport:
        async with cli_bus() as bus:
            return await (await _assets(bus, project_dir, data_dir)).diagnostics()

    report = run(main)
    if json_out:
        print_json(fields(report))
        return
    if not report.diagnostics:
        console.print("no diagnostics")
    _print_diagnostics(report.diagnostics)
