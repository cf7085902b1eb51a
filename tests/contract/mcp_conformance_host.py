"""A project's MCP server over streamable HTTP, for the MCP conformance suite run by hand.

    .venv/bin/python -m tests.contract.mcp_conformance_host [--port 8931]
    npx -y -p node@22 -p @modelcontextprotocol/conformance conformance server --url http://127.0.0.1:8931/mcp

The suite sends no ``Authorization`` header, so this serves ``asgi_app(build_server(...))``
alone (the gateway's bearer-token auth left out, its ``Host``/``Origin`` checks kept) on a
fresh nats-server with every service but the conversation service's LLM in this process,
for the project the MCP tests use (``tests/integration/mcp/support.py``: allow, ask and deny
rules, a skill, a slash command). Ctrl-C stops it. ``docs/mcp.md`` lists the scenarios that
apply and the ones that do not.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import tempfile
from pathlib import Path

import uvicorn

from jidocode.services.mcp_gateway import asgi_app, build_server
from jidocode.services.registry import SERVICES, serve_many
from jidocode.shared.bus import Bus
from jidocode.shared.clients import EngineClient
from jidocode.shared.config import Config
from jidocode.shared.natsserver import NatsServer
from jidocode.shared.trust import trust_project
from tests.helpers import wait_for_services
from tests.integration.mcp.support import write_project


async def serve(port: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root, home = Path(tmp) / "proj", Path(tmp) / "home"
        write_project(root)
        home.mkdir()
        trust_project(root, home=home)
        os.environ["JIDO_CODE_HOME"] = str(home)
        nats = NatsServer(store_dir=Path(tmp) / "js").start()
        stop = asyncio.Event()
        try:
            config = Config(nats_url=nats.url, jido_home=home, instance="conformance")
            services = asyncio.create_task(serve_many(config, stop, SERVICES))
            await wait_for_services(config, SERVICES, timeout=60)
            bus = await Bus.connect(config, "conformance")
            info = await EngineClient(bus, timeout=30).start_project(str(root))
            server = build_server(bus, info.project_id)
            app = asgi_app(
                server,
                allowed_hosts=["127.0.0.1:*", "localhost:*"],
                allowed_origins=["http://127.0.0.1:*", "http://localhost:*"],
            )
            print(f"project {info.project_id} at {root}: http://127.0.0.1:{port}/mcp", flush=True)
            web = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
            await web.serve()  # the app's lifespan runs the server's session manager
            await bus.close()
            stop.set()
            await services
        finally:
            nats.stop()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--port", type=int, default=8931)
    asyncio.run(serve(parser.parse_args().port))


if __name__ == "__main__":
    main()
