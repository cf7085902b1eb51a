"""`jidocode mcp-servers list|approve|revoke <dir>`: the MCP servers a project names, offline.

An HTTP server of a project's ``.mcp.json`` is a URL the tool runner would request from the
host, so it starts only once the user approved it here, for that project, that server name and
that exact URL (``services/tool_runner/mcp/approvals.py``, decision 0302). The approval is stored
in the user's global home (``mcp_approvals.json``, 0600), never in the project; the tool runner
notices it on its next use of the project, no restart needed. A changed URL awaits a new
approval. Servers of the user's own global ``.mcp.json`` need none.

``jidocode mcp-servers login <dir> <server>`` is the user's one OAuth login to an HTTP server
that wants one (``services/tool_runner/mcp/login.py``): it prints (and opens) the authorization
URL, receives the code on a loopback callback and keeps the tokens in the data home
(``mcp_oauth/``, 0600, never in a project), where the tool runner finds and refreshes them.
``logout`` forgets them.
"""

from __future__ import annotations

import os
import sys
import webbrowser
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer
from pydantic import BaseModel, ConfigDict, ValidationError

from jidocode.services.tool_runner.mcp.approvals import (
    Approval,
    approve_server,
    is_approved,
    revoke_server,
)
from jidocode.services.tool_runner.mcp.config import HttpServer, StdioServer, load_config
from jidocode.shared.config import default_data_home
from jidocode.shared.errors import InvalidInput, NotFound
from jidocode.shared.settings import global_home
from jidocode.shared.trust import trust_state

from .common import console, err_console, print_json, run

if TYPE_CHECKING:  # the MCP SDK is imported only when logging in
    from jidocode.services.tool_runner.mcp.login import PreRegistered

__all__ = ["ServerRow", "app", "check_mcp", "server_rows"]

app = typer.Typer(
    rich_markup_mode=None,
    help="The MCP servers of a project: list them; approve or revoke its HTTP servers.",
    no_args_is_help=True,
)

JSON = typer.Option(False, "--json", help="print JSON")


class ServerRow(BaseModel):
    """One server a project would use, and whether the tool runner starts it."""

    model_config = ConfigDict(frozen=True)

    name: str
    layer: str
    transport: str
    #: The URL of an HTTP server, the command line of a stdio one.
    target: str
    #: ``runs`` (in the sandbox, for a stdio server), ``approved``, ``awaiting_approval`` or
    #: ``untrusted`` (the project's ``.mcp.json`` counts only once the project is trusted).
    state: str


def _target(cfg: StdioServer | HttpServer) -> str:
    return cfg.url if isinstance(cfg, HttpServer) else " ".join([cfg.command, *cfg.args])


def server_rows(root: Path, *, home: Path) -> list[ServerRow]:
    """Every server of ``root``'s two layers as the tool runner would see it (reads files only)."""
    real = trust_state(root, home=home).root
    trusted = trust_state(root, home=home).trusted
    config = load_config(Path(real), global_home=home, trusted=True)
    rows = []
    for name, cfg in sorted(config.servers.items()):
        layer = config.layer.get(name, "")
        transport = "http" if isinstance(cfg, HttpServer) else "stdio"
        if layer == "project" and not trusted:
            state = "untrusted"
        elif layer == "project" and isinstance(cfg, HttpServer):
            state = "approved" if is_approved(real, name, cfg.url, home=home) else "awaiting_approval"
        else:
            state = "runs"
        rows.append(ServerRow(name=name, layer=layer, transport=transport, target=_target(cfg), state=state))
    return rows


def check_mcp(project: str, *, home: Path | None = None) -> dict[str, Any]:
    """``jidocode doctor``'s ``mcp`` line: ``warn`` naming each HTTP server of the project that
    awaits the user's approval (with its URL), else ``ok``; never a failure."""
    home = home or global_home()
    rows = server_rows(Path(project), home=home)
    waiting = [row for row in rows if row.state == "awaiting_approval"]
    if not waiting:
        return {
            "name": "mcp",
            "status": "ok",
            "detail": f"{len(rows)} server(s), none awaits approval",
            "fix": None,
        }
    real = trust_state(project, home=home).root
    return {
        "name": "mcp",
        "status": "warn",
        "detail": f"{len(waiting)} HTTP server(s) of the project await your approval (not started)",
        "fix": f"check each URL, then `jidocode mcp-servers approve {real} <server>`",
        "lines": [f"{row.name}: {row.target}" for row in waiting],
    }


def _project_http_server(root: Path, server: str, *, home: Path) -> HttpServer:
    """The HTTP server ``server`` of the project's own ``.mcp.json``; :class:`NotFound` naming why not."""
    config = load_config(root, global_home=home, trusted=True)
    cfg = config.servers.get(server)
    if cfg is None or config.layer.get(server) != "project":
        named = sorted(n for n, layer in config.layer.items() if layer == "project")
        raise NotFound(
            f"{root}/.mcp.json names no server {server!r} (it names: {', '.join(named) or 'none'})",
            details={"root": str(root), "server": server},
        )
    if not isinstance(cfg, HttpServer):
        raise InvalidInput(
            f"{server!r} of {root}/.mcp.json is a stdio server: it runs in the sandbox and needs no approval",
            details={"root": str(root), "server": server},
        )
    return cfg


@app.command("list")
def list_servers(
    project_dir: str = typer.Argument(..., help="the project's directory"),
    json_out: bool = JSON,
) -> None:
    """List the MCP servers the project would use, and which await your approval."""
    home = global_home()

    async def main() -> list[ServerRow]:
        return server_rows(Path(project_dir), home=home)

    rows = run(main)
    if json_out:
        print_json(rows)
        return
    for row in rows:
        console.print(f"{row.name}  {row.layer}  {row.transport}  {row.state}  {row.target}", highlight=False)
    if not rows:
        console.print(f"no MCP servers for {project_dir}", highlight=False)


@app.command()
def approve(
    project_dir: str = typer.Argument(..., help="the project's directory"),
    server: str = typer.Argument(..., help="the name of an HTTP server of its .mcp.json"),
    json_out: bool = JSON,
) -> None:
    """Approve an HTTP server of the project's .mcp.json at the URL it names now."""
    home = global_home()

    async def main() -> Approval:
        root = Path(trust_state(project_dir, home=home).root)
        cfg = _project_http_server(root, server, home=home)
        return approve_server(root, server, cfg.url, home=home)

    approval = run(main)
    if json_out:
        print_json(approval)
        return
    console.print(f"approved {approval.server} of {approval.root}: {approval.url}", highlight=False)
    if not trust_state(approval.root, home=home).trusted:
        err_console.print(
            f"[yellow]the project is not trusted: its .mcp.json counts once you run "
            f"`jidocode projects trust {approval.root}`[/]",
            highlight=False,
        )


@app.command()
def revoke(
    project_dir: str = typer.Argument(..., help="the project's directory"),
    server: str = typer.Argument(..., help="the server's name"),
) -> None:
    """Forget the approval of a project's HTTP server (its connection closes on next use)."""
    home = global_home()

    async def main() -> bool:
        return revoke_server(project_dir, server, home=home)

    if run(main):
        console.print(f"revoked {server} of {project_dir}", highlight=False)
    else:
        console.print(f"{server} of {project_dir} was not approved", highlight=False)


def _login_target(project_dir: str, server: str, *, home: Path) -> tuple[str, HttpServer]:
    """The project's root and the HTTP server ``server`` as the tool runner would reach it: of the
    global layer, or of the project's once the project is trusted and the URL approved."""
    rows = {row.name: row for row in server_rows(Path(project_dir), home=home)}
    row = rows.get(server)
    root = trust_state(project_dir, home=home).root
    if row is None:
        raise NotFound(
            f"no MCP server {server!r} for {root} (its servers: {', '.join(sorted(rows)) or 'none'})",
            details={"root": root, "server": server},
        )
    if row.transport != "http":
        raise InvalidInput(f"{server!r} is a stdio server: it needs no login", details={"server": server})
    if row.state in ("untrusted", "awaiting_approval"):
        raise InvalidInput(
            f"{server!r} of {root} is {row.state.replace('_', ' ')}: trust the project and approve the "
            f"server first (`jidocode mcp-servers approve {root} {server}`)",
            details={"server": server, "state": row.state},
        )
    cfg = load_config(Path(root), global_home=home, trusted=True).servers.get(server)
    if not isinstance(cfg, HttpServer):  # the file changed meanwhile
        raise NotFound(f"no HTTP MCP server {server!r} for {root} any more", details={"server": server})
    return root, cfg


@app.command("login")
def login_server(
    project_dir: str = typer.Argument(..., help="the project's directory"),
    server: str = typer.Argument(..., help="the name of an HTTP server it uses"),
    no_browser: bool = typer.Option(False, "--no-browser", help="only print the URL to open"),
    timeout_s: float = typer.Option(
        300.0, "--timeout", min=1, max=3600, help="seconds to wait for the login"
    ),
    client_id: str | None = typer.Option(
        None,
        "--client-id",
        help="a client you registered at the authorization server (no dynamic registration)",
    ),
    client_secret_env: str | None = typer.Option(
        None, "--client-secret-env", help="the environment variable holding that client's secret"
    ),
    callback_port: int = typer.Option(
        0, "--callback-port", min=0, max=65535, help="the callback's port, as registered (0: any)"
    ),
) -> None:
    """Log in to an HTTP MCP server that wants OAuth: open the URL printed, approve, done."""
    home = global_home()

    async def show(url: str) -> None:
        # the URL comes from the server's metadata: text, never markup
        console.print(
            f"open this URL to log in to {server}:\n{url}", highlight=False, markup=False, soft_wrap=True
        )
        sys.stdout.flush()  # a caller reading the pipe needs the URL now
        if not no_browser:
            webbrowser.open(url)

    async def main() -> tuple[int, Path]:
        # the MCP SDK and uvicorn only when logging in (the group's other commands start fast)
        from jidocode.services.tool_runner.mcp.login import login
        from jidocode.services.tool_runner.mcp.oauth import TokenFile, login_path

        client = _pre_registered(client_id, client_secret_env, callback_port)
        root, cfg = _login_target(project_dir, server, home=home)
        path = login_path(default_data_home(), server, cfg.url, project_root=root)
        tools = await login(
            cfg.url,
            dict(cfg.headers),
            TokenFile(path, cfg.url),
            show=show,
            timeout_s=timeout_s,
            client=client,
        )
        return len(tools), path

    count, path = run(main)
    console.print(f"logged in to {server}: {count} tool(s); the login is kept in {path}", highlight=False)


def _pre_registered(client_id: str | None, secret_env: str | None, port: int) -> PreRegistered | None:
    """The pre-registered client the options name (``None``: the login registers one); its secret
    is read from an environment variable, never from the command line."""
    if client_id is None:
        if secret_env is not None:
            raise InvalidInput(
                "--client-secret-env needs --client-id", details={"option": "client_secret_env"}
            )
        return None
    secret = None
    if secret_env is not None:
        secret = os.environ.get(secret_env)
        if not secret:
            raise InvalidInput(
                f"--client-secret-env: the environment variable {secret_env} is not set",
                details={"option": "client_secret_env", "variable": secret_env},
            )
    from jidocode.services.tool_runner.mcp.login import PreRegistered

    try:
        return PreRegistered(client_id=client_id, client_secret=secret, callback_port=port)
    except ValidationError as exc:
        raise InvalidInput(
            f"--client-id: {exc.errors()[0]['msg']}", details={"option": "client_id"}
        ) from None


@app.command("logout")
def logout_server(
    project_dir: str = typer.Argument(..., help="the project's directory"),
    server: str = typer.Argument(..., help="the server's name"),
) -> None:
    """Forget the stored OAuth login of an HTTP MCP server."""
    home = global_home()

    async def main() -> bool:
        from jidocode.services.tool_runner.mcp.oauth import TokenFile, login_path

        root, cfg = _login_target(project_dir, server, home=home)
        return TokenFile(
            login_path(default_data_home(), server, cfg.url, project_root=root), cfg.url
        ).forget()

    gone = run(main)
    console.print(f"{'logged out of' if gone else 'no login kept for'} {server}", highlight=False)
