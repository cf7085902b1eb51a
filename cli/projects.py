"""`jidocode projects start|stop|list|whereis` over the running engine."""

from __future__ import annotations

import typer
from rich.table import Table

from jidocode.shared.clients import EngineClient
from jidocode.shared.events.engine import ProjectInfo, ProjectList, ProjectLocation

from .common import cli_bus, console, fields, print_json, resolve_project, run

app = typer.Typer(help="Start, stop and list projects.", no_args_is_help=True)

JSON = typer.Option(False, "--json", help="print JSON")


@app.command()
def start(
    project_dir: str = typer.Argument(..., help="the project's directory"),
    data_dir: str = typer.Option(".jido", help="the project's data dir, relative to its root"),
    json_out: bool = JSON,
) -> None:
    """Start a project (the same directory always gives the same project id)."""

    async def main() -> ProjectInfo:
        async with cli_bus() as bus:
            return await resolve_project(bus, project_dir, data_dir=data_dir)

    info = run(main)
    if json_out:
        print_json(info)
    else:
        console.print(f"{info.project_id}  {info.root_path}")


@app.command()
def stop(project_id: str = typer.Argument(...), json_out: bool = JSON) -> None:
    """Stop a project."""

    async def main() -> ProjectInfo:
        async with cli_bus() as bus:
            return await EngineClient(bus).stop_project(project_id)

    info = run(main)
    if json_out:
        print_json(info)
    else:
        console.print(f"stopped {info.project_id}  {info.root_path}")


@app.command("list")
def list_(json_out: bool = JSON) -> None:
    """List running projects."""

    async def main() -> ProjectList:
        async with cli_bus() as bus:
            return await EngineClient(bus).list_projects()

    projects = run(main).projects
    if json_out:
        print_json(projects)  # a list of project records, as before the reply was a model
        return
    table = Table("project id", "root", "data dir", "started at")
    for p in projects:
        table.add_row(p.project_id, p.root_path, p.data_dir, p.started_at)
    console.print(table)


@app.command()
def whereis(project_id: str = typer.Argument(...), json_out: bool = JSON) -> None:
    """Show a project's record and the project-service instances serving it."""

    async def main() -> ProjectLocation:
        async with cli_bus() as bus:
            return await EngineClient(bus).whereis_project(project_id)

    found = run(main)
    if json_out:
        print_json(fields(found))  # {project, hosts}
    else:
        console.print(f"{project_id}  {found.project.root_path}  served by: {', '.join(found.hosts) or '-'}")
