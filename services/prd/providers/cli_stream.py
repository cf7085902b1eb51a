"""A coding-agent CLI as a provider: one iteration is one run of the CLI, its JSON lines normalized.

What every CLI adapter (:mod:`.codex`, :mod:`.claude`, :mod:`.gemini`) shares; an adapter only
gives a :class:`CliFlavor` (its default command, its argv, its pure ``normalize``):

- the CLI starts as an argv, never a shell line; the prompt is one argv item or stdin;
- it runs through the one sandbox (:func:`jidocode.shared.sandbox.prepare`) in the request's
  ``work_dir``, like a bash call of that project: bubblewrap or Landlock, the scrubbed
  environment, an empty home, the ``permissions.additional_directories`` of its settings
  readable. The provider's ``env`` is set inside the sandbox by
  ``/usr/bin/env NAME=VALUE …`` (the sandbox clears the environment to its allowlist), as for
  MCP stdio servers (decision 0206);
- stdout is read line by line: a line longer than :data:`LINE_CAP` is skipped (counted), more than
  :data:`MAX_LINES` lines end the run (``fatal``); stderr keeps its last :data:`STDERR_CAP` bytes
  for the error message;
- events go through a :class:`~.sequence.Sequencer` (the contract's order) into a bounded buffer:
  a slow reader of :meth:`CliRun.events` makes the CLI wait on its pipe (backpressure);
- the end: exit status ≠ 0 is a ``transient`` failure; a command that is missing (or hidden by
  the sandbox) a ``config`` one naming ``providers.<key>.command``; the timeout
  (``timeout_s``) and :meth:`CliRun.cancel` end every process of the run (its pid namespace
  under bubblewrap, the launcher's tree under Landlock, its process group without a sandbox).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import shutil
import signal
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from jidocode.services.prd.config import ProviderSettings
from jidocode.shared import sandbox
from jidocode.shared.errors import InvalidInput, PermissionDenied
from jidocode.shared.policy.loader import load_policy

from .base import (
    FailureKind,
    IterationRequest,
    ProviderCapabilities,
    ProviderContext,
    ProviderError,
)
from .channel import ChannelRun
from .login import NO_LOGIN, Login, login_files
from .sequence import Normalize, Sequencer, parse_line, safe_normalize

__all__ = [
    "LINE_CAP",
    "MAX_LINES",
    "STDERR_CAP",
    "CliFlavor",
    "CliProvider",
    "CliRun",
    "resolve_command",
]

#: Bytes of one stdout line (a longer one is skipped).
LINE_CAP: Final = 1024 * 1024
#: Lines of stdout one run may write before it is ended.
MAX_LINES: Final = 50_000
#: Bytes of stderr kept (the last ones).
STDERR_CAP: Final = 64 * 1024
#: Seconds the processes get to end after the stop began.
_STOP_GRACE_S: Final = 5.0
_ENV_NAME: Final = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

#: ``(request, settings, model) -> (arguments after the command and its extra args, stdin text)``.
BuildArgs = Callable[[IterationRequest, ProviderSettings, str], tuple[list[str], str | None]]


@dataclass(frozen=True)
class CliFlavor:
    """What makes one CLI's adapter: its key, default command, command line and mapping."""

    key: str
    default_command: str
    build: BuildArgs
    normalize: Normalize
    capabilities: ProviderCapabilities
    #: The files and hosts of the CLI's own login, used only with ``use_login`` (``login.py``).
    login: Login = NO_LOGIN


def _validate(key: str, settings: ProviderSettings) -> None:
    """Refuse settings the launch would misread (before any I/O)."""
    for i, arg in enumerate(settings.args):
        if "\x00" in arg:
            raise InvalidInput(
                f"providers.{key}.args[{i}] contains a NUL byte", details={"field": f"providers.{key}.args"}
            )
    if "\x00" in settings.command or "=" in settings.command:
        raise InvalidInput(
            f"providers.{key}.command must be a command name or path (no '=' or NUL): {settings.command!r}",
            details={"field": f"providers.{key}.command"},
        )
    for name, value in settings.env.items():
        if not _ENV_NAME.match(name) or "\x00" in value:
            raise InvalidInput(
                f"providers.{key}.env has an invalid variable {name!r} (a name is letters, digits and "
                "'_', not starting with a digit; values hold no NUL)",
                details={"field": f"providers.{key}.env"},
            )


def resolve_command(key: str, command: str) -> str:
    """The absolute path of the CLI, or :class:`ProviderError` ``config`` naming the setting."""
    found: str | None
    if os.sep in command:
        found = command if os.path.isfile(command) and os.access(command, os.X_OK) else None
    else:
        found = shutil.which(command)
    if found is None:
        raise ProviderError(
            "config",
            f"the {key} CLI {command!r} is not installed or not executable; install it or set "
            f"providers.{key}.command to its path",
        )
    return os.path.abspath(found)


class CliProvider:
    """A provider running one CLI flavor (see the module doc)."""

    def __init__(self, flavor: CliFlavor, settings: ProviderSettings, context: ProviderContext) -> None:
        _validate(flavor.key, settings)
        self._flavor = flavor
        self._settings = settings
        self._context = context

    def name(self) -> str:
        return self._flavor.key

    def capabilities(self) -> ProviderCapabilities:
        return self._flavor.capabilities

    def argv(self, request: IterationRequest, command: str) -> tuple[list[str], str | None]:
        """The full command line inside the sandbox and the stdin text (pure)."""
        model = request.model or self._settings.model or self._context.default_model
        tail, stdin = self._flavor.build(request, self._settings, model)
        line = [command, *self._settings.args, *tail]
        if self._settings.env:
            pairs = [f"{k}={v}" for k, v in sorted(self._settings.env.items())]
            line = ["/usr/bin/env", *pairs, *line]
        return line, stdin

    async def _visible(self, work_dir: str) -> list[str]:
        """The read-only directories of the launch: the context's, then the work dir project's
        ``permissions.additional_directories`` (as a bash call there gets them: the global layer,
        and the project's own once it is trusted)."""
        home = Path(self._context.jido_home) if self._context.jido_home else None
        try:
            policy, _ = await asyncio.to_thread(
                load_policy, work_dir, data_dir=self._context.data_dir, jido_home=home
            )
        except InvalidInput as exc:
            raise ProviderError("config", f"the settings of {work_dir} are invalid: {exc.message}") from None
        dirs = [*self._context.additional_directories]
        dirs += [d for d in policy.sandbox.additional_directories if d not in dirs]
        return dirs

    async def run_iteration(self, request: IterationRequest) -> CliRun:
        key = self._flavor.key
        if not os.path.isabs(request.work_dir) or not os.path.isdir(request.work_dir):
            raise ProviderError(
                "fatal", f"work_dir {request.work_dir!r} is not an existing absolute directory"
            )
        command = resolve_command(key, self._settings.command or self._flavor.default_command)
        argv, stdin = self.argv(request, command)
        visible = await self._visible(request.work_dir)
        exits = contextlib.AsyncExitStack()
        try:
            launch = await sandbox.prepare(
                argv,
                root=request.work_dir,
                data_dir=self._context.data_dir,
                jido_home=self._context.jido_home,
                additional_directories=visible,
                egress=await self._login_egress(exits),
                read_files=self._login_files(),
            )
        except PermissionDenied as exc:
            await exits.aclose()
            raise ProviderError("config", f"the {key} CLI cannot run in the sandbox: {exc.message}") from None
        except BaseException:
            await exits.aclose()
            raise
        try:
            proc = await asyncio.create_subprocess_exec(
                *launch.argv,
                cwd=launch.cwd,
                env=launch.env,
                stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                start_new_session=True,
                pass_fds=launch.pass_fds,
            )
        except OSError as exc:
            await launch.close()
            await exits.aclose()
            raise ProviderError("config", f"the {key} CLI {command!r} cannot be started: {exc}") from None
        run = CliRun(
            key,
            proc,
            launch,
            stdin=stdin,
            timeout_s=self._settings.timeout_s,
            normalize=self._flavor.normalize,
            metadata={"command": os.path.basename(command), "sandbox": launch.mode},
            exits=exits,
        )
        run.start()
        return run

    def _login_files(self) -> list[str]:
        """The CLI's login files, readable in its sandbox when the user turned ``use_login`` on."""
        if not self._settings.use_login:
            return []
        return login_files(self._flavor.login, os.environ.get("HOME") or os.path.expanduser("~"))

    async def _login_egress(self, exits: contextlib.AsyncExitStack) -> sandbox.Egress | None:
        """With ``use_login``: a pass of the egress proxy to the CLI's login domains, closed by
        ``exits`` when the run ends (``None``: no login, or no proxy in this context)."""
        opener = self._context.egress
        domains = self._flavor.login.domains
        if not self._settings.use_login or opener is None or not domains:
            return None
        return await exits.enter_async_context(opener(self._flavor.key, domains))


class CliRun(ChannelRun):
    """One running CLI (an :class:`~.base.IterationRun`; events, result and cancel from :class:`ChannelRun`)."""

    def __init__(
        self,
        key: str,
        proc: asyncio.subprocess.Process,
        launch: sandbox.Launch,
        *,
        stdin: str | None,
        timeout_s: float,
        normalize: Normalize,
        metadata: dict[str, str],
        exits: contextlib.AsyncExitStack | None = None,
    ) -> None:
        super().__init__()
        #: What the run holds besides its launch (a pass of the egress proxy), closed after it.
        self._exits = exits
        self._key = key
        self._proc = proc
        self._launch = launch
        self._stdin = stdin
        self._timeout_s = timeout_s
        self._normalize = normalize
        self._seq = Sequencer(key, metadata)
        self._namespace: sandbox.Namespace | None = None
        if launch.info_fd is not None:
            self._namespace = sandbox.Namespace(asyncio.get_running_loop(), launch.info_fd, proc.pid)
        self._stderr = bytearray()
        self._lines = 0
        self._oversized = 0
        self._limit_hit = False
        self._stopping: asyncio.Future[None] | None = None

    @property
    def pid(self) -> int:
        """The process started (bubblewrap's, the launcher's or the CLI's own)."""
        return self._proc.pid

    def start(self) -> None:
        self._task = asyncio.create_task(self._pump(), name=f"prd-provider-{self._key}")

    # -- the producer side ---------------------------------------------------------------

    async def _pump(self) -> None:
        stopped: tuple[FailureKind, str] | None = None
        reader = asyncio.create_task(self._read_stdout())
        errors = asyncio.create_task(self._read_stderr())
        writer = asyncio.create_task(self._write_stdin())
        try:
            await self._channel.put(self._seq.open())
            await asyncio.wait_for(self._until_exit(reader), self._timeout_s)
            if self._limit_hit:
                stopped = (
                    "fatal",
                    f"{self._key} wrote more than {MAX_LINES} lines of events; it was stopped",
                )
        except TimeoutError:
            stopped = ("transient", f"{self._key} timed out after {self._timeout_s:g} s; it was stopped")
        except asyncio.CancelledError:
            stopped = ("cancelled", "the iteration was cancelled")
        finally:
            await asyncio.shield(self._stop())
            for task in (reader, writer):
                task.cancel()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(errors), _STOP_GRACE_S)
            errors.cancel()
            await asyncio.gather(reader, writer, errors, return_exceptions=True)
        stderr = self._stderr.decode("utf-8", "replace")
        code = self._proc.returncode
        # bubblewrap says "execvp …"; the Landlock launcher "sandbox (landlock): [Errno …]", status 126
        unstartable = "execvp" in stderr or (code == 126 and "sandbox (landlock): [Errno" in stderr)
        if stopped is None and code not in (0, None) and unstartable:
            stopped = (
                "config",
                f"the {self._key} CLI cannot be started in the sandbox ({stderr.strip()[-500:]}); set "
                f"providers.{self._key}.command to a path the sandbox can see (an additional directory)",
            )
        if self._oversized:
            self._seq.metadata["oversized_lines"] = str(self._oversized)
        tail, self._result = self._seq.finish(exit_code=code, stderr=stderr, stopped=stopped)
        await self._channel.put(tail, bounded=False)
        await self._channel.close()

    async def _until_exit(self, reader: asyncio.Task[None]) -> None:
        """Until the CLI ended and its stdout was read to the end (or the line limit was hit)."""
        exited = asyncio.ensure_future(self._proc.wait())
        try:
            await asyncio.wait([reader, exited], return_when=asyncio.FIRST_COMPLETED)
            if reader.done() and self._limit_hit:
                return
            await exited
            # the CLI is gone: what it left behind goes too (its output stays in the pipe)
            await asyncio.shield(self._stop())
            await reader
        finally:
            exited.cancel()

    async def _read_stdout(self) -> None:
        assert self._proc.stdout is not None
        stream = self._proc.stdout
        buf = bytearray()
        skipping = False
        while True:
            chunk = await stream.read(65536)
            if not chunk:
                break
            buf += chunk
            while (i := buf.find(b"\n")) >= 0:
                line = bytes(buf[:i])
                del buf[: i + 1]
                if skipping or len(line) > LINE_CAP:
                    skipping = False
                    self._oversized += 1
                    continue
                if not await self._line(line):
                    return
            if len(buf) > LINE_CAP:
                buf.clear()
                skipping = True
        if buf and not skipping:
            await self._line(bytes(buf))

    async def _line(self, line: bytes) -> bool:
        """Take one line; False once the line limit is hit."""
        self._lines += 1
        if self._lines > MAX_LINES:
            self._limit_hit = True
            return False
        native = parse_line(line)
        if native is not None:
            await self._channel.put(self._seq.feed(safe_normalize(self._normalize, native)))
        return True

    async def _read_stderr(self) -> None:
        assert self._proc.stderr is not None
        while chunk := await self._proc.stderr.read(65536):
            self._stderr += chunk
            if len(self._stderr) > STDERR_CAP:
                del self._stderr[: len(self._stderr) - STDERR_CAP]

    async def _write_stdin(self) -> None:
        pipe = self._proc.stdin
        if pipe is None:
            return
        try:
            if self._stdin:
                pipe.write(self._stdin.encode())
                await pipe.drain()
        except (BrokenPipeError, ConnectionResetError):
            pass  # the CLI ended without reading its prompt: its exit says why
        finally:
            with contextlib.suppress(OSError):
                pipe.close()

    def _stop(self) -> asyncio.Future[None]:
        """End every process of the run and close the launch: one stop, awaited by all (shielded)."""
        if self._stopping is None:
            self._stopping = asyncio.ensure_future(self._end())
        return self._stopping

    async def _end(self) -> None:
        proc = self._proc
        if self._namespace is not None:
            await self._namespace.end(proc, _STOP_GRACE_S)
        if self._launch.graceful_stop and proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGTERM)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(proc.wait()), _STOP_GRACE_S)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        await proc.wait()
        if self._namespace is not None:
            self._namespace.close()
            self._namespace = None
        await self._launch.close()
        if self._exits is not None:
            await self._exits.aclose()
