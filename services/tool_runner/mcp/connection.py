"""One MCP server of one project on this replica: started on first use, restarted after a crash.

Lifecycle (:class:`State`)::

    idle ──first use──▶ starting ──handshake + tools/list──▶ ready ──close──▶ closed
                           │                                   │
                           └──fails / times out──▶ crashed ◀───┘ connection lost
                                                      │
                                next use, after the backoff (:class:`.backoff.Backoff`)
                                                      └──▶ starting

The SDK's :class:`mcp.Client` is entered and left by one owner task (anyio's cancel scopes need
that); calls are made from the callers' tasks, each bounded by its own timeout, so a hanging
server fails the calls to it (``timeout``) and never holds up another tool. A stdio server runs
through :mod:`.sandboxed` (the OS sandbox); an HTTP server is reached with the SDK's
streamable HTTP transport and the configured headers, and, unless those name an
``Authorization``, with the user's stored OAuth login (:mod:`.oauth`): a server that wants a new
login stops the connection at once, its start or call failing with ``mcp_login_required``
naming the command to run. A server's elicitation during a call is asked through that call's
approval flow (:mod:`.elicit`).

The launcher is a host process with the runner's environment: it starts as an isolated Python
(``-I``) in ``/``, never in the project, so nothing of the project is imported before the
sandbox is entered (docs/decisions/0302).
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import itertools
import logging
import os
import tempfile
import time
from collections.abc import AsyncIterator, Callable
from typing import IO, Any, Final

import anyio
import httpx2
import mcp_types as types
from mcp import Client
from mcp.client._transport import TransportStreams
from mcp.client.session import ClientRequestContext
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.exceptions import MCPError

from jidocode.services.tool_runner.approvals import TIMEOUT, Reply
from jidocode.shared.errors import InvalidInput, JidoError, RequestTimeout
from jidocode.shared.runner import HOST_CWD, python_module_argv

from .backoff import Backoff
from .config import HttpServer, StdioServer
from .elicit import CURRENT_ASKER, Asker, answerable, form_of, question, result_of
from .oauth import LoginRequired, TokenFile, login_command, runner_auth
from .sandboxed import LaunchSpec

#: The launcher of a stdio server (:mod:`.sandboxed`), run as an isolated Python in ``/``.
LAUNCHER_MODULE: Final = "jidocode.services.tool_runner.mcp.sandboxed"

__all__ = ["MAX_TOOLS", "McpServerError", "ServerConnection", "State"]

log = logging.getLogger("jidocode.tool_runner.mcp")

#: At most this many tools of one server join the catalogue.
MAX_TOOLS: Final = 256
#: How much of a server's stderr an error quotes.
_STDERR_TAIL: Final = 2000


class State(enum.Enum):
    IDLE = "idle"
    STARTING = "starting"
    READY = "ready"
    CRASHED = "crashed"
    CLOSED = "closed"


class McpServerError(JidoError):
    """An MCP server could not be started or reached (``mcp_server_unavailable``, retryable)."""

    error_type = "mcp_server_unavailable"
    default_retryable = True


def _leaves(exc: BaseException) -> list[BaseException]:
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for sub in exc.exceptions for leaf in _leaves(sub)]
    return [exc]


def _describe(exc: BaseException) -> str:
    return "; ".join(f"{type(e).__name__}: {e}" if str(e) else type(e).__name__ for e in _leaves(exc))


def _lost(exc: BaseException) -> bool:
    """Whether ``exc`` means the connection is gone (not just one failed request)."""
    for leaf in _leaves(exc):
        if isinstance(leaf, MCPError) and leaf.code == types.CONNECTION_CLOSED:
            return True
        if isinstance(leaf, anyio.ClosedResourceError | anyio.BrokenResourceError | anyio.EndOfStream):
            return True
    return False


class ServerConnection:
    """The connection of this replica to one configured server of one project."""

    def __init__(
        self,
        name: str,
        config: StdioServer | HttpServer,
        *,
        where: LaunchSpec,
        start_timeout_s: float = 20.0,
        backoff: Backoff | None = None,
        clock: Callable[[], float] = time.monotonic,
        login: TokenFile | None = None,
    ) -> None:
        if start_timeout_s <= 0:
            raise ValueError("start_timeout_s must be positive")
        self.name = name
        self.config = config
        #: The project's sandbox (``command``/``args``/``env`` are replaced by the server's).
        self.where = where
        self.start_timeout_s = start_timeout_s
        self.backoff = backoff or Backoff()
        self._clock = clock
        #: The user's stored OAuth login for an HTTP server (``None``: no OAuth).
        self.login = login
        #: Whether the server wants a new login (the last start or call stopped for it).
        self.login_required = False
        #: The askers of the calls running now (an elicitation's fallback when its context has none).
        self._askers: dict[int, Asker] = {}
        self._numbers = itertools.count(1)
        self.state = State.IDLE
        self.tools: list[types.Tool] = []
        self.last_error = ""
        self.starts = 0
        self._client: Client | None = None
        self._owner: asyncio.Task[None] | None = None
        self._stop: asyncio.Event = asyncio.Event()
        self._lock = asyncio.Lock()
        self._started_at = 0.0
        self._errlog: IO[str] | None = None
        self._ready: asyncio.Future[Client] = asyncio.get_running_loop().create_future()
        self._ready.cancel()
        self._timer: asyncio.TimerHandle = asyncio.get_running_loop().call_later(0, _nothing)
        self._expired = ""
        #: The owner task's cancel scope: how a start is aborted (see :meth:`_own`).
        self._scope: anyio.CancelScope | None = None

    # --- use ---------------------------------------------------------------------------------

    async def ensure(self, timeout_s: float) -> Client:
        """The connected client, starting (or restarting, after the backoff) the server when needed.

        A start goes on in the background when this caller stops waiting (``timeout_s``), so a
        server slower to start than one call's time is ready for a later call.
        """
        t0 = time.monotonic()
        try:
            async with asyncio.timeout(timeout_s):
                async with self._lock:
                    if self.state is State.CLOSED:
                        raise McpServerError(
                            f"MCP server {self.name!r} is stopped (its project stopped)",
                            details={"server": self.name},
                        )
                    if self.state is State.READY and self._client is not None:
                        return self._client
                    if self.state is not State.STARTING:
                        wait = self.backoff.wait(self._clock())
                        if wait >= timeout_s - (time.monotonic() - t0):
                            raise McpServerError(
                                f"MCP server {self.name!r} failed ({self.last_error}); it restarts in "
                                f"{wait:.1f} s, after this call's time",
                                details={"server": self.name, "restart_in_s": round(wait, 2)},
                            )
                        if wait > 0:
                            await asyncio.sleep(wait)  # the backoff itself, not a synchronisation
                        self._begin()
                    ready = self._ready
                return await asyncio.shield(ready)
        except TimeoutError:
            raise McpServerError(
                f"MCP server {self.name!r} is still starting (no handshake after "
                f"{time.monotonic() - t0:.1f} s; it gets {self.start_timeout_s:g} s): retry later",
                details={"server": self.name, "reason": "starting"},
            ) from None

    def starting_for(self) -> float:
        """Seconds since the current (or last) start began."""
        return self._clock() - self._started_at

    def poke(self) -> None:
        """Start the server in the background if it is down and its backoff has passed (no wait)."""
        down = self.state in (State.IDLE, State.CRASHED) and not self._lock.locked()
        if down and self.backoff.wait(self._clock()) == 0:
            self._begin()

    async def call(
        self, tool: str, args: dict[str, Any], timeout_s: float, *, ask: Asker | None = None
    ) -> types.CallToolResult:
        """Call ``tool``; :class:`RequestTimeout` when the server does not answer in ``timeout_s``
        (a question the server asks meanwhile, through ``ask``, is answered within that time)."""
        t0 = time.monotonic()
        client = await self.ensure(timeout_s)
        left = timeout_s - (time.monotonic() - t0)
        number = next(self._numbers)
        if ask is not None:
            ask = _within(ask, t0 + timeout_s)
            self._askers[number] = ask
        context = CURRENT_ASKER.set(ask)
        try:
            async with asyncio.timeout(max(left, 0.001)):
                return await client.call_tool(tool, args)
        except TimeoutError:
            raise RequestTimeout(
                f"MCP server {self.name!r} did not answer {tool!r} within {timeout_s:g} s",
                details={"server": self.name, "tool": tool},
                retryable=False,
            ) from None
        except MCPError as exc:
            if self.login_required:
                raise self._login_error() from None
            if _lost(exc):
                await self._crashed(exc, client)
                raise McpServerError(
                    f"MCP server {self.name!r} went away during {tool!r}: {self.last_error}",
                    details={"server": self.name, "tool": tool},
                ) from None
            raise InvalidInput(
                f"MCP server {self.name!r} refused {tool!r}: {exc.message}",
                details={"server": self.name, "tool": tool, "code": exc.code},
            ) from None
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, anyio.EndOfStream) as exc:
            if self.login_required:
                raise self._login_error() from None
            await self._crashed(exc, client)
            raise McpServerError(
                f"MCP server {self.name!r} went away during {tool!r}: {self.last_error}",
                details={"server": self.name, "tool": tool},
            ) from None
        finally:
            CURRENT_ASKER.reset(context)
            self._askers.pop(number, None)

    async def _on_elicitation(
        self, context: ClientRequestContext, params: types.ElicitRequestParams
    ) -> types.ElicitResult:
        """The server asks the user something while a tool runs: asked through the approval flow
        of the call it belongs to (its context's asker; else the only call running), ``cancel``
        when no call can ask it or a yes could not answer it (:mod:`.elicit`)."""
        ask = CURRENT_ASKER.get()
        if ask is None and len(self._askers) == 1:
            ask = next(iter(self._askers.values()))
        if ask is None or not answerable(params):
            log.info(
                "MCP server %s: elicitation answered cancel (no call can ask it, or a yes cannot)", self.name
            )
            return types.ElicitResult(action="cancel")
        args, reason = question(self.name, params)
        try:
            answer = await ask(f"elicitation-{next(self._numbers)}", args, reason, form_of(params))
        except JidoError as exc:
            log.warning("MCP server %s: elicitation not asked: %s", self.name, exc.message)
            return types.ElicitResult(action="cancel")
        try:
            return result_of(answer, params)
        except InvalidInput as exc:  # the client's content: nothing of it reaches the server
            log.warning("MCP server %s: elicitation answered cancel: %s", self.name, exc.message)
            return types.ElicitResult(action="cancel")

    async def close(self) -> None:
        """Stop the server (idempotent); later uses fail."""
        self.state = State.CLOSED
        self._timer.cancel()
        if not self._ready.done() and self._scope is not None:
            self._scope.cancel()  # still starting: no handshake to wait for
        await self._shutdown()

    # --- lifecycle ---------------------------------------------------------------------------

    def _begin(self) -> None:
        """Start the owner task; :attr:`_ready` is its outcome; a timer bounds the handshake."""
        loop = asyncio.get_running_loop()
        self.state = State.STARTING
        self.login_required = False
        self.starts += 1
        self._started_at = self._clock()
        self._stop = asyncio.Event()
        self._ready = loop.create_future()
        self._scope = None
        self._owner = asyncio.create_task(self._own(self._ready), name=f"mcp-{self.name}")
        self._timer = loop.call_later(self.start_timeout_s, self._start_expired, self._ready)

    def _start_expired(self, ready: asyncio.Future[Client]) -> None:
        if not ready.done() and self._scope is not None:
            self._expired = f"no handshake within {self.start_timeout_s:g} s"
            self._scope.cancel()

    async def _own(self, ready: asyncio.Future[Client]) -> None:
        """The owner task: enter the client, list the tools, hold the connection until told to stop.

        A start is aborted through :attr:`_scope` (an anyio cancel scope), never by cancelling this
        task: the SDK's transport shuts the server down in a shielded scope, which a native
        ``Task.cancel`` would cut short (leaving the server's process running).
        """
        self._expired = ""
        try:
            with anyio.CancelScope() as scope:
                self._scope = scope
                async with Client(
                    self._transport(), client_info=_CLIENT_INFO, elicitation_callback=self._on_elicitation
                ) as client:
                    self.tools = await _list_tools(client)
                    self._timer.cancel()
                    self._client = client
                    self.state = State.READY
                    ready.set_result(client)
                    log.info("MCP server %s started (%d tools)", self.name, len(self.tools))
                    await self._stop.wait()
            if not ready.done():
                raise TimeoutError(self._expired or "the start was stopped")
            if self.login_required and self.state is State.READY:  # a call met a 401: down
                self._failed(self._login_error())
        except BaseException as exc:
            if not ready.done():  # a failed start: say why, back off
                self._failed(exc)
                ready.set_exception(
                    self._login_error()
                    if self.login_required
                    else McpServerError(
                        f"MCP server {self.name!r} did not start: {self.last_error}",
                        details={"server": self.name},
                    )
                )
                ready.exception()  # retrieved: nobody may be waiting any more
            if isinstance(exc, asyncio.CancelledError):
                raise

    def _transport(self) -> Any:
        cfg = self.config
        if isinstance(cfg, HttpServer):
            auth = None
            if self.login is not None:
                auth = runner_auth(cfg.url, self.login, login_needed=self._login_needed)
            return _http_transport(cfg, auth)
        spec = self.where.model_copy(
            update={"command": cfg.command, "args": list(cfg.args), "env": dict(cfg.env)}
        )
        self._close_errlog()
        # kept open for the server's life (its stderr), closed by _close_errlog
        self._errlog = tempfile.TemporaryFile(mode="w+", encoding="utf-8", errors="replace")  # noqa: SIM115
        argv = python_module_argv(LAUNCHER_MODULE, spec.model_dump_json())
        params = StdioServerParameters(
            command=argv[0],
            args=argv[1:],
            env=dict(os.environ),  # the runner's own; the sandbox scrubs the server's
            cwd=HOST_CWD,  # never the project: the launcher runs on the host (decision 0302)
        )
        return stdio_client(params, errlog=self._errlog)

    async def _login_needed(self, _authorization_url: str) -> None:
        """The server wants a new authorization (the OAuth flow is about to stop): take the
        connection down now, its start or call failing with :class:`LoginRequired`."""
        self.login_required = True
        self._expired = self._login_error().message
        if self._scope is not None:
            self._scope.cancel()

    def _login_error(self) -> LoginRequired:
        url = self.config.url if isinstance(self.config, HttpServer) else ""
        command = login_command(self.where.root, self.name)
        return LoginRequired(
            f"MCP server {self.name!r} ({url}) needs you to log in: run `{command}`",
            details={"server": self.name, "url": url, "command": command},
        )

    def _failed(self, exc: BaseException) -> None:
        """Record a crash or a failed start: the reason (with the server's stderr), the backoff
        (none after a refused login: the next use after the user's login must not wait)."""
        tail = self._stderr_tail()
        self.last_error = _describe(exc) + (f" (stderr: {tail})" if tail else "")
        if self.login_required:
            self.last_error = self._login_error().message
        self._client = None
        if self.state is not State.CLOSED:
            self.state = State.CRASHED
        if self.login_required:
            log.warning("MCP server %s: %s", self.name, self.last_error)
            return
        delay = self.backoff.crashed(self._clock(), started_at=self._started_at)
        log.warning("MCP server %s failed: %s; next start in %.1f s", self.name, self.last_error, delay)

    async def _crashed(self, exc: BaseException, client: Client) -> None:
        """``client``'s connection was lost while in use: record it and take it down, once (a
        call that still held an older connection leaves the current one alone)."""
        if client is not self._client:
            return
        self._failed(exc)
        await self._shutdown()

    async def _shutdown(self) -> None:
        self._client = None
        self._stop.set()
        owner, self._owner = self._owner, None
        if owner is not None:
            try:
                async with asyncio.timeout(10):
                    await asyncio.shield(owner)
            except TimeoutError:
                owner.cancel()
                with contextlib.suppress(BaseException):
                    await owner
            except asyncio.CancelledError:
                if not owner.cancelled():
                    raise  # the caller is cancelled, not the owner
            except Exception:
                pass

    def _stderr_tail(self) -> str:
        if self._errlog is None:
            return ""
        with contextlib.suppress(OSError, ValueError):
            self._errlog.flush()
            self._errlog.seek(0)
            text = self._errlog.read()
            self._errlog.seek(0, os.SEEK_END)
            return " ".join(text.split())[-_STDERR_TAIL:]
        return ""

    def _close_errlog(self) -> None:
        if self._errlog is not None:
            with contextlib.suppress(OSError):
                self._errlog.close()
            self._errlog = None


_CLIENT_INFO = types.Implementation(name="jidocode", version="1")


@contextlib.asynccontextmanager
async def _http_transport(cfg: HttpServer, auth: httpx2.Auth | None) -> AsyncIterator[TransportStreams]:
    """The SDK's streamable HTTP transport with the configured headers and the OAuth ``auth`` (its
    HTTP client closed after)."""
    async with (
        create_mcp_http_client(headers=dict(cfg.headers), auth=auth) as http,
        streamable_http_client(cfg.url, http_client=http) as streams,
    ):
        yield streams


def _within(ask: Asker, deadline: float) -> Asker:
    """``ask`` answering ``timeout`` once the call's time (``deadline``, monotonic) is over."""

    async def bounded(
        question_id: str, args: dict[str, Any], reason: str, form: dict[str, Any] | None
    ) -> Reply:
        try:
            async with asyncio.timeout(max(deadline - time.monotonic(), 0.001)):
                return await ask(question_id, args, reason, form)
        except TimeoutError:
            return Reply(TIMEOUT)

    return bounded


def _nothing() -> None:
    return None


async def _list_tools(client: Client) -> list[types.Tool]:
    tools: list[types.Tool] = []
    cursor: str | None = None
    while len(tools) < MAX_TOOLS:
        page = await client.list_tools(cursor=cursor)
        tools.extend(page.tools)
        cursor = page.next_cursor
        if not cursor:
            break
    return tools[:MAX_TOOLS]
