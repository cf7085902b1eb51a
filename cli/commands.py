"""The ``jidocode`` commands: name, ``module:attribute`` under ``jidocode.cli``, one-line help.

Plain data with no imports, so ``./dev --help`` lists the commands with the system's Python
before anything is installed (it runs this file with ``runpy.run_path``). ``cli/main.py``
registers them lazily (:mod:`jidocode.cli.lazy`); ``tests/unit/cli/test_lazy_cli.py`` checks
that each one-liner is the command's own.
"""

__all__ = ["TABLE"]

#: In ``--help`` order. ``target`` is a function (a command) or a ``typer.Typer`` (a group).
TABLE: tuple[tuple[str, str, str], ...] = (
    ("up", "up:up", "Run the whole system: embedded NATS (unless NATS_URL is set) and every service."),
    ("console", "console:console", "Print the web console's login URL (--open: open it in a browser)."),
    ("status", "status:status", "List the services found via $SRV.PING/INFO/STATS, with their endpoints and stats."),
    ("probe", "status:probe", "Exit 0 when service NAME answers $SRV.PING from this host (a health check for containers)."),
    ("doctor", "doctor:doctor", "Check Python, the NATS binary, the data home, a running system, the model and the sandbox."),
    ("models", "models:models", "The models usable with the provider keys here, and how to choose one."),
    ("watch", "watch:watch", "Tail every event on the bus, one line each: each event once, in arrival order, with its subject."),
    ("chat", "chat:chat", "Chat with the assistant in a project (one message, or interactive)."),
    ("replay", "replay:replay_command", "Run a recorded conversation again through the real services; exit 0 when every projection comes out the same, 1 with the first difference otherwise."),
    ("trace", "trace:trace", "The conversation's last turn as a tree of spans with durations (tracing must be on)."),
    ("mcp", "mcp:mcp", "Serve one project over MCP on stdio (for Claude Desktop, Claude Code, Cursor …)."),
    ("acp", "acp:acp", "Serve JidoCode to an editor over the Agent Client Protocol on stdio (Zed, JetBrains …)."),
    ("serve", "serve:serve", "Run one service in the foreground (what containers run)."),
    ("projects", "projects:app", "Start, stop and list projects; trust or untrust a project root."),
    ("conversations", "conversations:app", "A project's conversations: list, show, stop, delete, prune."),
    ("tools", "tools:app", "List and run a project's tools under its policy."),
    ("checkpoints", "checkpoints:app", "A project's checkpoints (one per conversation turn): list, diff, restore."),
    ("assets", "assets:app", "Skills, commands and workflows of a project."),
    ("contract", "contract:app", "The published contract of the bus."),
    ("dev", "dev:app", "dev commands"),
    ("mcp-servers", "mcp_servers:app", "The MCP servers of a project: list them; approve or revoke its HTTP servers."),
    ("prd", "prd:app", "PRD loops: a product requirements document worked story by story."),
    ("deploy", "deploy:app", "deployment helpers: NATS users and configs, secrets"),
)  # fmt: skip
