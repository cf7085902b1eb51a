"""Run one service in this process until SIGTERM/SIGINT (``jidocode serve <name>``).

SIGTERM or SIGINT sets the stop event: the service stops taking requests,
drains its NATS connection and exits 0. When started by ``jidocode up`` the
service also stops if its parent dies, so no orphan outlives the supervisor.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys

from jidocode.services.registry import load_serve
from jidocode.shared.config import Config
from jidocode.shared.errors import JidoError

__all__ = ["configure_logging", "run_service"]


def configure_logging(level: str | None = None) -> None:
    logging.basicConfig(
        level=(level or os.environ.get("JIDO_LOG_LEVEL", "INFO")).upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    for noisy in ("LiteLLM", "litellm", "httpx", "watchfiles"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


async def _watch_parent(stop: asyncio.Event, parent: int) -> None:
    while not stop.is_set():
        if os.getppid() != parent:
            logging.getLogger("jidocode").warning("supervisor %d is gone: stopping", parent)
            stop.set()
            return
        try:
            await asyncio.wait_for(stop.wait(), 1.0)
        except TimeoutError:
            continue


async def _main(name: str) -> None:
    serve = load_serve(name)
    config = Config.from_env()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    watchers = []
    parent = os.environ.get("JIDO_SUPERVISOR_PID")
    if parent and parent.isdigit():
        watchers.append(asyncio.create_task(_watch_parent(stop, int(parent))))
    try:
        await serve(config, stop)
    finally:
        stop.set()
        for task in watchers:
            await task


def run_service(name: str) -> None:
    configure_logging()
    try:
        asyncio.run(_main(name))
    except JidoError as exc:
        logging.getLogger("jidocode").error("%s: %s", name, exc.message)
        raise SystemExit(1) from None
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    run_service(sys.argv[1])
