"""What every CLI command shares: running a coroutine, connecting, printing errors and JSON."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any, TypeVar

import typer
from rich.console import Console
from rich.markup import escape

from jidocode.shared.bus import Bus
from jidocode.shared.clients import EngineClient
from jidocode.shared.config import Config
from jidocode.shared.errors import InvalidInput, JidoError, NotFound, ServiceUnavailable
from jidocode.shared.events import EventModel
from jidocode.shared.events.engine import ProjectInfo
from jidocode.shared.jsonable import to_jsonable

__all__ = [
    "RECONNECT_ATTEMPTS",
    "NatsReach",
    "cli_bus",
    "console",
    "err_console",
    "fields",
    "print_json",
    "resolve_project",
    "run",
]

T = TypeVar("T")

console = Console()
err_console = Console(stderr=True)


#: Reconnect rounds (half a second apart) a long-running command (``watch``, ``chat``) makes after
#: losing NATS before it gives up: enough to ride out a restart of ``jidocode up``, not to wait
#: forever on a system that is gone.
RECONNECT_ATTEMPTS = 30


class NatsReach:
    """Ends a long-running command when its connection to NATS is lost for good.

    Once connected, a command's client would reconnect forever (a turn waiting for its
    answer would hang if ``up`` died); this caps the reconnects at :data:`RECONNECT_ATTEMPTS`
    and calls ``on_lost`` when nats-py gives up. :meth:`check` then raises the message.
    """

    def __init__(self, bus: Bus, on_lost: Callable[[], None], command: str) -> None:
        self.nc = bus.nc
        self.url = self.nc.connected_url.netloc if self.nc.connected_url else "NATS"
        self.command = command
        self.nc.options["max_reconnect_attempts"] = RECONNECT_ATTEMPTS
        self.lost = False
        self.checked = False
        previous = self.nc._closed_cb  # nats-py calls it once reconnects are exhausted

        async def closed() -> None:
            if previous is not None:
                await previous()
            if not self.checked:
                self.lost = True
                on_lost()

        self.nc._closed_cb = closed

    def check(self) -> None:
        """Raise :class:`ServiceUnavailable` (exit 1 with a message) if the connection was lost."""
        self.checked = True
        if self.lost:
            raise ServiceUnavailable(
                f"lost the connection to NATS at {self.url} and could not reconnect: is JidoCode still "
                f"running? Start it with `jidocode up`, then run `jidocode {self.command}` again"
            )


def run(main: Callable[[], Awaitable[T]]) -> T:
    """Run ``main()``; a ``JidoError`` becomes one plain line on stderr and exit code 1 (2 for bad input)."""
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    try:
        return asyncio.run(main())  # type: ignore[arg-type]
    except JidoError as exc:
        # the message may quote input (a name, a story id): text, never markup
        err_console.print(f"[bold red]error[/] ({exc.type}): {escape(exc.message)}", highlight=False)
        raise typer.Exit(2 if isinstance(exc, InvalidInput | NotFound) else 1) from None
    except KeyboardInterrupt:
        raise typer.Exit(130) from None


@asynccontextmanager
async def cli_bus(name: str = "cli") -> AsyncIterator[Bus]:
    """A bus connection for one command (``NATS_URL`` or the embedded default)."""
    bus = await Bus.connect(Config.from_env(), name, wait=False)
    try:
        yield bus
    finally:
        await bus.close()


async def resolve_project(
    bus: Bus, project_dir: str, *, data_dir: str = ".jido", restart: bool = False
) -> ProjectInfo:
    """The project on ``project_dir``: started if it never was (the engine returns the same one for
    a root); a stopped one is returned as it is (its record says ``stopped``, and what needs it
    running says so) unless ``restart`` (``jidocode projects start``)."""
    root = os.path.abspath(os.path.expanduser(project_dir))
    engine = EngineClient(bus)
    if not restart:
        real = os.path.realpath(root)
        for info in (await engine.list_projects()).projects:
            if info.root_path == real and info.status == "stopped":
                return info
    return await engine.start_project(root, data_dir=data_dir)


def fields(reply: EventModel, *, exclude: frozenset[str] = frozenset()) -> dict[str, Any]:
    """A reply's fields as JSON values, without its CloudEvent ``type`` (what ``--json`` prints)."""
    return reply.model_dump(mode="json", exclude={"type", *exclude})


def print_json(value: Any) -> None:
    """``value`` as indented JSON on stdout (models as ``to_jsonable`` dumps them)."""
    sys.stdout.write(json.dumps(to_jsonable(value), indent=2, ensure_ascii=False) + "\n")
    sys.stdout.flush()
