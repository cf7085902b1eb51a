"""`jidocode tools list|run|policy <project-dir>`: the project's tools through the real services.

Each command starts (or finds) the project through the engine, then asks the
project service (catalog, policy) or the tool runner (run) through their typed
clients. ``list`` prints the tools the model sees as a table (their specs as JSON
with ``--json``) and, on stderr, how many tools the policy hides and why. A run from
the CLI has no conversation, so a call the policy would *ask* about is refused with a
message saying so; allow it in settings.json to run it here.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import uuid
from typing import Any, Final

import typer
from rich import box
from rich.table import Table
from rich.text import Text

from jidocode.shared.clients import ProjectClient, ToolsClient
from jidocode.shared.errors import InvalidInput, JidoError
from jidocode.shared.events.tools import ToolCallMeta, ToolCatalog, ToolPolicy, ToolResult, ToolSpec
from jidocode.shared.settings import global_home
from jidocode.shared.tools import BUILTIN_SPECS
from jidocode.shared.trust import trust_state

from .common import cli_bus, console, fields, print_json, resolve_project, run

#: Seconds a Ctrl-C waits for the tool runner to take the call's cancel.
CANCEL_WAIT_S: Final = 5.0

#: The built-in tools' names.
BUILTINS: Final = frozenset(spec.name for spec in BUILTIN_SPECS)

app = typer.Typer(
    rich_markup_mode=None, help="List and run a project's tools under its policy.", no_args_is_help=True
)

DATA_DIR = typer.Option(".jido", "--data-dir", help="the project's data dir, relative to its root")


def _parse_args(raw: str) -> dict[str, Any]:
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise InvalidInput(f"--args is not valid JSON: {exc.msg} at position {exc.pos}") from None
    if not isinstance(value, dict):
        raise InvalidInput('--args must be a JSON object, e.g. \'{"path": "README.md"}\'')
    return value


def _why_hidden(tool: str, policy: ToolPolicy) -> str:
    """Why the policy hides ``tool`` (what ``filter_tools`` decided, in words)."""
    from jidocode.shared.policy.rules import InvalidRule, parse_rule  # the policy package: 50 ms

    for raw in policy.deny:
        try:
            rule = parse_rule(raw)
        except InvalidRule:
            continue
        if rule.pattern is None and rule.covers_tool(tool):
            return f"denied by the rule {raw}"
    return f'no allow or ask rule names them and "default" is "{policy.default}"'


def hidden_note(shown: list[str], every: list[str], policy: ToolPolicy, *, trusted: bool) -> list[str]:
    """The lines ``tools list`` prints on stderr about the tools the policy hides (none: no line)."""
    hidden = [t for t in every if t not in set(shown)]
    if not hidden:
        return []
    reasons: dict[str, list[str]] = {}
    for tool in hidden:
        reasons.setdefault(_why_hidden(tool, policy), []).append(tool)
    lines = [
        f"{len(hidden)} of {len(every)} tools hidden by the policy of {policy.root} "
        f"(`--all` lists them; `jidocode tools policy {policy.root}` shows the rules):"
    ]
    lines += [f"  {', '.join(tools)}: {why}" for why, tools in reasons.items()]
    if not trusted:
        lines.append(
            "  the project is untrusted, so its own allow and ask rules do not count: "
            f"`jidocode projects trust {policy.root}`"
        )
    return lines


def _source(name: str) -> str:
    """Where a tool comes from, as the table says it: built-in, an MCP server, or an asset."""
    if name.startswith("mcp__"):
        return f"MCP {name.split('__')[1]}"
    return "built-in" if name in BUILTINS else "asset"


def _access(spec: ToolSpec) -> str:
    if spec.safety.read_only:
        return "reads"
    return "changes, destructive" if spec.safety.destructive else "changes"


def _first_line(text: str, width: int = 100) -> str:
    line = text.strip().splitlines()[0] if text.strip() else ""
    return line if len(line) <= width else line[: width - 1] + "…"


def tools_table(specs: list[ToolSpec], *, hidden: frozenset[str] = frozenset()) -> Table:
    """The tools as a table: name, where from, what a call may do, the first line of the
    description, and (when some are) which the policy hides. Cells are plain text: a name or a
    description comes from an asset or an MCP server, never read as markup."""
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False)
    # a name is what a rule or a call names: whole on one line, never cut
    table.add_column("tool", no_wrap=True, min_width=max((len(s.name) for s in specs), default=4))
    for column in ("from", "access", *(("policy",) if hidden else ())):
        table.add_column(column, no_wrap=True)
    table.add_column("description", overflow="fold")
    for spec in specs:
        cells = [spec.name, _source(spec.name), _access(spec)]
        if hidden:
            cells.append("hidden" if spec.name in hidden else "shown")
        cells.append(_first_line(spec.description))
        table.add_row(*(Text(cell) for cell in cells))
    return table


@app.command("list")
def list_(
    project_dir: str = typer.Argument(..., help="the project's directory"),
    all_tools: bool = typer.Option(False, "--all", help="include tools the policy hides"),
    json_out: bool = typer.Option(False, "--json", help="print the specs the model sees as JSON"),
    data_dir: str = DATA_DIR,
) -> None:
    """Print the tools the project exposes (policy-filtered) as a table, or their specs as JSON
    with --json; on stderr, what is hidden and why."""

    async def main() -> tuple[ToolCatalog, ToolCatalog, ToolPolicy]:
        async with cli_bus() as bus:
            info = await resolve_project(bus, project_dir, data_dir=data_dir)
            # the first listing starts the project's MCP servers: give it their start time
            project = ProjectClient(bus, info.project_id, timeout=30.0)
            shown = await project.list_tools()
            return shown, await project.list_tools(include_hidden=True), await project.policy()

    shown, every, policy = run(main)
    listed = every.tools if all_tools else shown.tools
    hidden = frozenset(t.name for t in every.tools) - {t.name for t in shown.tools}
    if json_out:
        print_json(listed)  # a list of specs
    elif listed:
        console.print(tools_table(listed, hidden=hidden if all_tools else frozenset()))
    else:
        typer.echo("no tools", err=True)
    if not all_tools:
        trusted = trust_state(policy.root, home=global_home()).trusted
        for line in hidden_note(
            [t.name for t in shown.tools], [t.name for t in every.tools], policy, trusted=trusted
        ):
            typer.echo(line, err=True)


@app.command("policy")
def policy(
    project_dir: str = typer.Argument(..., help="the project's directory"), data_dir: str = DATA_DIR
) -> None:
    """Print the project's effective policy (rules, default, protected files, limits) as JSON."""

    async def main() -> ToolPolicy:
        async with cli_bus() as bus:
            info = await resolve_project(bus, project_dir, data_dir=data_dir)
            return await ProjectClient(bus, info.project_id).policy()

    print_json(fields(run(main)))


@app.command("run")
def run_(
    project_dir: str = typer.Argument(..., help="the project's directory"),
    tool: str = typer.Argument(..., help="tool name, e.g. read_file"),
    args: str = typer.Option("{}", "--args", help="the tool's arguments as a JSON object"),
    request_id: str | None = typer.Option(None, "--request-id", help="idempotency key (default: a new one)"),
    timeout: float = typer.Option(120.0, "--timeout", help="seconds to wait for the result"),
    data_dir: str = DATA_DIR,
) -> None:
    """Run one tool call and print its result (the seed's ok/data/error format) as JSON.

    Exit code 0 when the result is ok, 1 when the tool failed or was refused.
    """

    async def main() -> ToolResult:
        call_args = _parse_args(args)
        async with cli_bus() as bus:
            info = await resolve_project(bus, project_dir, data_dir=data_dir)
            meta = ToolCallMeta(request_id=request_id or f"cli-{uuid.uuid4()}")
            tools = ToolsClient(bus, info.project_id)
            try:
                return await tools.run(tool, call_args, meta=meta, timeout=timeout)
            except asyncio.CancelledError:  # Ctrl-C: the call stops too, not only this wait
                with contextlib.suppress(JidoError, TimeoutError):
                    await tools.cancel(meta.request_id, timeout=CANCEL_WAIT_S)
                raise

    result = run(main)
    print_json(fields(result))  # the seed's {ok, data, artifacts, logs, error}
    if not result.ok:
        raise typer.Exit(1)
