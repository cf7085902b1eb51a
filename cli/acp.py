"""`jidocode acp`: JidoCode as an Agent Client Protocol agent on stdio, for editors.

The entry an editor puts in its settings (Zed's ``agent_servers``; see ``docs/acp.md``)::

    {"agent_servers": {"JidoCode": {"command": "jidocode", "args": ["acp"]}}}

The editor names the project in each ``session/new`` (its ``cwd``). The command connects to the
running system (``NATS_URL``, else the one ``jidocode up`` started, as every command does) and
answers until the editor closes stdin. With no system running it exits at once with a message on
stderr saying to start ``jidocode up``: it never starts services of its own. stdout carries
protocol messages only; logs go to stderr (``JIDO_LOG_LEVEL``, WARNING by default).
"""

from __future__ import annotations

import os

from jidocode.shared.config import Config
from jidocode.shared.runner import configure_logging

from .common import cli_bus, run

__all__ = ["acp"]


def acp() -> None:
    """Serve JidoCode to an editor over the Agent Client Protocol on stdio (Zed, JetBrains …)."""
    configure_logging(os.environ.get("JIDO_LOG_LEVEL", "WARNING"))

    async def main() -> None:
        async with cli_bus("acp") as bus:
            # the ACP SDK's models take a moment to import: only this command pays, once it found the system
            from .acp_agent import serve_stdio

            await serve_stdio(bus, Config.from_env())

    run(main)
