"""`jidocode projects start|stop|list|whereis` over the running engine; `trust|untrust` offline.

``trust``/``untrust`` edit the user's trust store (``<global home>/trusted_projects.json``,
see ``shared/trust.py``) and need no running service: the services read the
store on their next settings load (the tool runner's policy cache and the asset
loader's watcher notice the change at once).
"""

from __future__ import annotations

from pathlib import Path

import typer
from rich.table import Table

from jidocode.shared.clients import EngineClient
from jidocode.shared.errors import InvalidInput
from jidocode.shared.events.engine import ProjectInfo, ProjectList, ProjectLocation
from jidocode.shared.settings import UNTRUSTED_IGNORED, Diagnostic, global_home, load_settings
from jidocode.shared.trust import TrustEntry, TrustState, trust_project, trusted_projects, untrust_project

from .common import cli_bus, console, err_console, fields, print_json, resolve_project, run

app = typer.Typer(
    rich_markup_mode=None,
    help="Start, stop and list projects; trust or untrust a project root.",
    no_args_is_help=True,
)

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
            return await resolve_project(bus, project_dir, data_dir=data_dir, restart=True)

    info = run(main)
    if json_out:
        print_json(info)
    else:
        console.print(f"{info.project_id}  {info.root_path}")


def project_to_stop(given: str, projects: list[ProjectInfo]) -> str:
    """The id of the project ``given`` names: a project id as it is, or a directory (a path that
    exists, or one with a ``/``) as the project whose root it is; :class:`InvalidInput` when no
    project has that root."""
    if "/" not in given and given not in (".", "..") and not Path(given).is_dir():
        return given
    root = str(Path(given).expanduser().resolve())
    for info in projects:
        if info.root_path == root:
            return info.project_id
    raise InvalidInput(
        f"no project has the root {root} (`jidocode projects list` shows the projects)",
        details={"root": root},
    )


@app.command()
def stop(
    project: str = typer.Argument(..., help="the project's id, or its directory"),
    json_out: bool = JSON,
) -> None:
    """Stop a project: its running turns and tool calls are cancelled, its conversations stopped;
    `projects start <dir>` runs it again under the same id, with its conversations."""

    async def main() -> ProjectInfo:
        async with cli_bus() as bus:
            engine = EngineClient(bus)
            return await engine.stop_project(
                project_to_stop(project, (await engine.list_projects()).projects)
            )

    info = run(main)
    if json_out:
        print_json(info)
    else:
        console.print(f"stopped {info.project_id}  {info.root_path}")


@app.command("list")
def list_(json_out: bool = JSON) -> None:
    """List projects, running and stopped."""

    async def main() -> ProjectList:
        async with cli_bus() as bus:
            return await EngineClient(bus).list_projects()

    projects = run(main).projects
    if json_out:
        print_json(projects)  # a list of project records, as before the reply was a model
        return
    table = Table("project id", "status", "root", "data dir", "started at")
    for p in projects:
        table.add_row(p.project_id, p.status, p.root_path, p.data_dir, p.started_at)
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


def untrusted_effects(root: str) -> list[Diagnostic]:
    """What the project's own settings ask for that trust would let through (the ignored keys)."""
    loaded = load_settings(Path(root), trusted=False)
    return [d for d in loaded.diagnostics if d.problem.startswith(UNTRUSTED_IGNORED)]


def _print_state(state: TrustState) -> None:
    if state.trusted:
        via = "" if state.via == state.root else f" (through {state.via})"
        console.print(f"trusted  {state.root}{via}", highlight=False)
    else:
        console.print(
            f"untrusted  {state.root}: its settings can only restrict and the assistant may only read it",
            highlight=False,
        )
    if state.problem:
        err_console.print(f"[yellow]{state.problem}[/]", highlight=False)


@app.command()
def trust(
    project_dir: str | None = typer.Argument(None, help="the project's directory (its realpath is stored)"),
    list_: bool = typer.Option(False, "--list", help="list the trusted roots instead"),
    json_out: bool = JSON,
) -> None:
    """Trust a project root: its own settings, hooks and MCP servers take effect, and the assistant
    may ask to edit files and run commands there (and below it)."""
    home = global_home()

    async def main() -> TrustState | list[TrustEntry]:
        if list_:
            return trusted_projects(home=home)
        if project_dir is None:
            raise InvalidInput("give a project directory, or --list")
        effects = untrusted_effects(project_dir)
        state = trust_project(project_dir, home=home)
        if not json_out:
            for d in effects:
                console.print(f"  now applies: {d.file}: {d.key}", highlight=False)
        return state

    result = run(main)
    if json_out:
        print_json(result)
    elif isinstance(result, list):
        for entry in result:
            console.print(f"{entry.root}  {entry.trusted_at}", highlight=False)
        if not result:
            console.print(f"no trusted project roots in {home}", highlight=False)
    else:
        _print_state(result)


@app.command()
def untrust(
    project_dir: str = typer.Argument(..., help="the project's directory"),
    json_out: bool = JSON,
) -> None:
    """Forget a trusted root: its settings can only restrict again, and the assistant may only read it."""
    home = global_home()

    async def main() -> TrustState:
        return untrust_project(project_dir, home=home)

    state = run(main)
    if json_out:
        print_json(state)
    else:
        _print_state(state)
