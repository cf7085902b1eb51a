"""Run one service in this process until SIGTERM/SIGINT.

Each service's ``__main__`` (``python -m jidocode.services.<name>``) and
``jidocode serve <name>`` end here. SIGTERM or SIGINT sets the stop event:
the service stops taking requests, drains its NATS connection and exits 0.
When started by ``jidocode up`` (``JIDO_SUPERVISOR_PID`` set) the service
also stops if its parent dies, so no orphan outlives the supervisor: on Linux
the kernel signals it the moment the supervisor dies (:func:`die_with_parent`,
``PR_SET_PDEATHSIG``, set by ``up`` when it starts the process); elsewhere the
service notices within a second (it watches its parent's pid).

The collector is tuned for a long-lived service (:func:`tune_gc`): a larger
first generation and, once the service has started, everything that exists is
frozen out of collections, so a full collection no longer walks litellm's and
pydantic's module state.

The event loop is uvloop where it is installed (``JIDO_EVENT_LOOP=asyncio``
chooses the standard loop): ``bench/bus.py`` measures a request/reply about a
quarter faster on it.

Every Python the runtime starts on the host (the services under ``jidocode up``,
the MCP stdio launcher) is started by :func:`python_module_argv` in
:data:`HOST_CWD`: isolated (``-I``: no current or script directory on
``sys.path``, no ``PYTHON*`` variable, no user site) and outside any project, so
a ``jidocode/__init__.py`` in a project can never run with a service's secrets
(docs/decisions/0302). The installed package is still found: site-packages (and
an editable install's finder there) stay on the path.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import signal
import sys
from collections.abc import Callable, Coroutine
from typing import Any, Final

from jidocode.shared.config import Config
from jidocode.shared.errors import JidoError
from jidocode.shared.log_limits import install_repeat_limiter
from jidocode.shared.telemetry import make_formatter

__all__ = [
    "HOST_CWD",
    "SPARE_ENV",
    "Serve",
    "configure_logging",
    "die_with_parent",
    "python_module_argv",
    "run_service",
    "tune_gc",
    "wait_to_serve",
]

#: The working directory of every Python the runtime starts on the host: no project's.
HOST_CWD: Final = "/"


def python_module_argv(module: str, *args: str) -> list[str]:
    """The command line running ``module`` with this interpreter, isolated (``-I``) (pure).

    ``-I`` keeps the current directory, the script's directory, ``PYTHON*`` variables and the
    user site out of the child's imports; start it with ``cwd=HOST_CWD``.
    """
    if not module or module.startswith("-"):
        raise ValueError(f"not a module name: {module!r}")
    return [sys.executable, "-I", "-m", module, *args]


def die_with_parent(sig: signal.Signals = signal.SIGTERM) -> Callable[[], None] | None:
    """A ``preexec_fn`` asking Linux to send ``sig`` to the child when the thread that starts it
    ends (``prctl(PR_SET_PDEATHSIG)``); ``None`` elsewhere.

    The parent's pid is checked after the call: a parent that died in between would never send
    the signal, so the child sends it to itself.
    """
    if not sys.platform.startswith("linux"):
        return None
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    parent = os.getpid()
    pr_set_pdeathsig = 1

    def preexec() -> None:
        libc.prctl(pr_set_pdeathsig, int(sig), 0, 0, 0)
        if os.getppid() != parent:
            os.kill(os.getpid(), sig)

    return preexec


#: A service's entry point: ``async def serve(config, stop)`` (its ``service.py``).
Serve = Callable[[Config, asyncio.Event], Coroutine[Any, Any, None]]


def configure_logging(level: str | None = None, *, service: str = "") -> None:
    """Log to stderr: JSON lines when it is not a terminal, text on one (``JIDO_LOG_FORMAT``
    overrides), with trace, span, project and conversation ids (``shared.telemetry``)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(make_formatter(service, sys.stderr))
    logging.basicConfig(level=(level or os.environ.get("JIDO_LOG_LEVEL", "INFO")).upper(), handlers=[handler])
    for noisy in ("LiteLLM", "litellm", "httpx", "watchfiles"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    install_repeat_limiter()  # an outage is a few lines and a summary, not a flood


#: Allocations between two young-generation collections (CPython's default is 700).
GC_THRESHOLD: tuple[int, int, int] = (10_000, 20, 20)
#: Seconds after start when what exists is frozen (imports and start-up are done by then).
GC_FREEZE_AFTER_S = 10.0


def tune_gc(*, freeze: bool = True) -> None:
    """Fewer collections for a process that serves: a larger young generation and,
    with ``freeze``, what exists now moved out of the collector's reach.

    Full collections walking litellm's and the conversations' long-lived objects
    showed up as a tenth of a busy conversation service's time (``bench/turn.py
    --concurrent``; figures in docs/benchmarks.md).
    """
    gc.set_threshold(*GC_THRESHOLD)
    if freeze:
        gc.collect()
        gc.freeze()


async def _freeze_later(stop: asyncio.Event) -> None:
    try:
        await asyncio.wait_for(stop.wait(), GC_FREEZE_AFTER_S)
    except TimeoutError:
        tune_gc()


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


async def _main(serve: Serve) -> None:
    config = Config.from_env()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    tune_gc(freeze=False)
    watchers = [asyncio.create_task(_freeze_later(stop))]
    parent = os.environ.get("JIDO_SUPERVISOR_PID")
    if parent and parent.isdigit():
        watchers.append(asyncio.create_task(_watch_parent(stop, int(parent))))
    try:
        await serve(config, stop)
    finally:
        stop.set()
        for task in watchers:
            await task


def _run(main: Coroutine[Any, Any, None]) -> None:
    """``asyncio.run`` on uvloop unless ``JIDO_EVENT_LOOP=asyncio`` (or uvloop is missing)."""
    if os.environ.get("JIDO_EVENT_LOOP", "uvloop") == "uvloop":
        try:
            import uvloop
        except ImportError:
            pass
        else:
            uvloop.run(main)
            return
    asyncio.run(main)


#: Set in a warm spare's environment by ``jidocode up`` (``cli/supervisor.py``).
SPARE_ENV: Final = "JIDO_SPARE"


def wait_to_serve(warm: Callable[[], object] | None = None) -> bool:
    """In a warm spare (:data:`SPARE_ENV` set): run ``warm`` (the imports the service would make
    on its first request), then block until the supervisor writes ``go`` on stdin. ``False`` when
    stdin ends first (the supervisor went away: the spare exits). Outside a spare: ``True`` at once."""
    if os.environ.pop(SPARE_ENV, None) != "1":
        return True
    if warm is not None:
        warm()
    gc.collect()  # the imports' garbage, collected now rather than in the first turn
    return sys.stdin.buffer.readline().strip() == b"go"


def run_service(name: str, serve: Serve, *, warm: Callable[[], object] | None = None) -> None:
    """Run ``serve`` (the service ``name``) until a signal; a ``JidoError`` exits 1.

    Its metrics are served when the environment gives it a port (``shared.telemetry.metrics``).
    A warm spare (:func:`wait_to_serve`) runs ``warm`` and waits to be told to serve first.
    """
    configure_logging(service=name)
    if not wait_to_serve(warm):
        return
    from jidocode.shared.telemetry import metrics  # a service's import, not every command's

    try:
        metrics.serve_from_env(name)
    except (ValueError, OSError) as exc:  # a bad or busy port: say which, do not start half-observable
        logging.getLogger("jidocode").error("%s: metrics: %s", name, exc)
        raise SystemExit(1) from None
    try:
        _run(_main(serve))
    except JidoError as exc:
        logging.getLogger("jidocode").error("%s: %s", name, exc.message)
        raise SystemExit(1) from None
    except KeyboardInterrupt:
        pass
