"""The ``jidocode`` command line."""

from __future__ import annotations

import typer

from . import assets, chat, contract, conversations, dev, projects, replay, tools
from .doctor import doctor
from .serve import run_service
from .status import probe, status
from .trace import trace
from .up import up
from .watch import watch

app = typer.Typer(
    name="jidocode",
    help="JidoCode: a multi-project coding-assistant runtime over NATS.",
    no_args_is_help=True,
    add_completion=False,
)

app.command()(up)
app.command()(status)
app.command()(probe)
app.command()(doctor)
app.command()(watch)
app.command()(chat.chat)
app.command("replay")(replay.replay_command)
app.add_typer(projects.app, name="projects")
app.add_typer(conversations.app, name="conversations")
app.add_typer(tools.app, name="tools")
app.add_typer(assets.app, name="assets")
app.add_typer(contract.app, name="contract")
app.add_typer(dev.app, name="dev")
app.command()(trace)

from .mcp import mcp  # noqa: E402  (issue 15: one project as an MCP server on stdio)

app.command()(mcp)

from . import mcp_servers  # noqa: E402  (issue 24: a project's HTTP MCP servers await approval)

app.add_typer(mcp_servers.app, name="mcp-servers")

from . import prd  # noqa: E402  (issue 18: the PRD loop's CLI and TUI)

app.add_typer(prd.app, name="prd")

try:  # the deploy commands (issue 7) land separately
    from . import deploy

    app.add_typer(deploy.app, name="deploy")
except ImportError:  # pragma: no cover
    pass


@app.command()
def serve(
    name: str = typer.Argument(..., help="a service (engine, project, ...) or gateway"),
) -> None:
    """Run one service in the foreground (what containers run)."""
    run_service(name.replace("-", "_"))


if __name__ == "__main__":
    app()
