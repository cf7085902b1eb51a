"""The quality service (seed 004): run the check commands in the sandbox, report each result.

A check is one command of the user's configuration (``quality_commands``; never model text),
run as ``bash -c <command>`` in the work dir through the one OS sandbox
(:func:`jidocode.shared.sandbox.prepare` and :func:`~jidocode.shared.sandbox.run_command`,
exactly as the bash tool runs a command): the check sees the work dir read-write, an empty
home, a private ``/tmp``, no network, a scrubbed environment; its timeout ends everything it
started.

Every check runs, in order, whatever the earlier ones gave; the report is ``ok`` when each
exited 0 in time and changed no protected path (an empty list is ``ok``): a check is project
content, and one that touches ``.git/config``, a hook or the settings is stopped at once, the
paths put back, and it fails. What a check prints is streamed to ``on_output`` as
it comes (up to ``stream_cap`` bytes, so a long check shows progress) and kept capped in its
:class:`CheckOutcome` (the head and the tail: a test run's summary is at its end). A sandbox
that refuses the call (none available, a protected path too large) is a failed check whose
output is the refusal, not an exception: the loop then reports it like any failing check.

Bad arguments (no work dir, too many or empty commands, a limit out of range) raise
:class:`~jidocode.shared.errors.InvalidInput` / ``NotFound`` before anything runs.
"""

from __future__ import annotations

import asyncio
import codecs
import os
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Final

from jidocode.shared import sandbox
from jidocode.shared.config import default_jido_home
from jidocode.shared.errors import InvalidInput, NotFound, PermissionDenied, RequestTimeout
from jidocode.shared.events.prd import CheckOutcome

from ._capture import HeadTail

__all__ = [
    "MAX_COMMANDS",
    "MAX_COMMAND_CHARS",
    "MAX_OUTPUT_CAP",
    "MAX_TIMEOUT_S",
    "MIN_OUTPUT_CAP",
    "OnOutput",
    "QualityReport",
    "run_checks",
]

#: Called with (command, chunk of output) as a check runs.
OnOutput = Callable[[str, str], Awaitable[None]]

#: The shell of a check, as the bash tool starts it (no profile, no rc file).
SHELL: Final = ("/bin/bash", "--noprofile", "--norc", "-c")
MAX_COMMANDS: Final = 64
MAX_COMMAND_CHARS: Final = 16 * 1024
MIN_OUTPUT_CAP: Final = 256
MAX_OUTPUT_CAP: Final = 16 * 1024 * 1024
MAX_TIMEOUT_S: Final = 24 * 3600.0
#: What a check may stream to ``on_output`` by default (its kept output is ``output_cap``).
DEFAULT_STREAM_CAP: Final = 1024 * 1024
STREAM_CUT: Final = "\n[… output no longer streamed after {cap} bytes; the check goes on …]\n"


class QualityReport:
    """The outcome of every check, in the order they ran."""

    def __init__(self, checks: list[CheckOutcome]) -> None:
        self.checks = checks

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.checks)

    @property
    def failed(self) -> list[CheckOutcome]:
        return [c for c in self.checks if not c.ok]

    def __repr__(self) -> str:
        return f"QualityReport(ok={self.ok}, checks={[(c.command, c.exit_code) for c in self.checks]!r})"


def _validate(
    work_dir: str,
    commands: Sequence[str],
    timeout_s: float,
    output_cap: int,
    stream_cap: int,
    additional_directories: Sequence[str],
) -> None:
    """``InvalidInput`` (``NotFound`` for a missing work dir) naming the first bad argument."""
    _validate_commands(commands)
    _validate_limits(timeout_s, output_cap, stream_cap)
    if isinstance(additional_directories, str) or len(additional_directories) > MAX_COMMANDS:
        raise InvalidInput(f"additional_directories must be a list of at most {MAX_COMMANDS} paths")
    for d in additional_directories:
        if not isinstance(d, str) or not os.path.isabs(d) or "\0" in d:
            raise InvalidInput(f"additional directory {d!r} is not an absolute path")
    if not work_dir or "\0" in work_dir:
        raise InvalidInput(f"work_dir {work_dir!r} is not a path")
    if not os.path.isdir(work_dir):
        raise NotFound(f"work_dir {work_dir!r} is not a directory", details={"work_dir": work_dir})


def _validate_commands(commands: Sequence[str]) -> None:
    """A list of at most :data:`MAX_COMMANDS` commands, each non-empty text without NUL and not too long."""
    if isinstance(commands, str):
        raise InvalidInput("quality commands must be a list of commands, not one string")
    if len(commands) > MAX_COMMANDS:
        raise InvalidInput(f"too many quality commands: {len(commands)} (at most {MAX_COMMANDS})")
    for i, command in enumerate(commands):
        if not isinstance(command, str) or not command.strip():
            raise InvalidInput(f"quality command #{i + 1} is empty", details={"index": i})
        if len(command) > MAX_COMMAND_CHARS:
            raise InvalidInput(
                f"quality command #{i + 1} is {len(command)} characters long (at most {MAX_COMMAND_CHARS})",
                details={"index": i},
            )
        if "\0" in command:
            raise InvalidInput(f"quality command #{i + 1} holds a NUL character", details={"index": i})


def _validate_limits(timeout_s: float, output_cap: int, stream_cap: int) -> None:
    """Each check's timeout, kept output and streamed output within their ranges."""
    if not 0 < timeout_s <= MAX_TIMEOUT_S:
        raise InvalidInput(f"check timeout_s must be in (0, {MAX_TIMEOUT_S:g}] s, not {timeout_s!r}")
    if not MIN_OUTPUT_CAP <= output_cap <= MAX_OUTPUT_CAP:
        raise InvalidInput(
            f"check output_cap must be in [{MIN_OUTPUT_CAP}, {MAX_OUTPUT_CAP}] bytes, not {output_cap!r}"
        )
    if stream_cap < 0:
        raise InvalidInput(f"check stream_cap must be >= 0, not {stream_cap!r}")


class _Stream:
    """Chunks of one check's output, decoded and handed to ``on_output`` in order by one task.

    The runner's reader callback is synchronous (:data:`jidocode.shared.sandbox.OnChunk`): it only
    queues; the pump awaits ``on_output`` and sends whatever piled up meanwhile as one piece, so a
    slow reader gets fewer, larger pieces rather than holding up the check. At most ``cap``
    bytes are streamed, then one marker; the kept output (:class:`HeadTail`) is not affected.
    """

    def __init__(self, command: str, on_output: OnOutput, cap: int) -> None:
        self._command = command
        self._on_output = on_output
        self._cap = cap
        self._sent = 0
        self._cut = False
        self._decoder = codecs.getincrementaldecoder("utf-8")("replace")
        self._pending: list[str] = []
        self._wake = asyncio.Event()
        self._closed = False
        self._task = asyncio.create_task(self._pump())

    def feed(self, chunk: bytes) -> None:
        if self._cut:
            return
        room = self._cap - self._sent
        piece = chunk[:room]
        self._sent += len(piece)
        text = self._decoder.decode(piece)
        if len(chunk) > room:
            self._cut = True
            text += self._decoder.decode(b"", final=True) + STREAM_CUT.format(cap=self._cap)
        if text:
            self._pending.append(text)
            self._wake.set()

    async def _pump(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            if self._pending:
                text, self._pending = "".join(self._pending), []
                await self._on_output(self._command, text)
            if self._closed and not self._pending:
                return

    async def close(self) -> None:
        """Deliver what is left; an exception of ``on_output`` is raised here."""
        if not self._cut:
            rest = self._decoder.decode(b"", final=True)
            if rest:
                self._pending.append(rest)
        self._closed = True
        self._wake.set()
        await self._task

    def cancel(self) -> None:
        self._task.cancel()


@dataclass
class _Ran:
    """How a check's process ended: its exit code, a timeout, the sandbox mode, a note for its
    output (a refusal, a timeout, a failed start, protected paths put back) and those paths."""

    exit_code: int | None = None
    timed_out: bool = False
    mode: str = ""
    note: str = ""
    repaired: list[str] = field(default_factory=list)

    def add_note(self, text: str) -> None:
        self.note += ("\n" if self.note else "") + text


async def _run_sandboxed(
    work_dir: str,
    command: str,
    on_chunk: sandbox.OnChunk,
    *,
    timeout_s: float,
    additional_directories: Sequence[str],
    jido_home: str | None,
    data_dir: str,
    arguments: Sequence[str] = (),
) -> _Ran:
    """Run one check through the sandbox to its end; a refusal of the sandbox is a :class:`_Ran` too."""
    ran = _Ran()
    try:
        launch = await sandbox.prepare(
            [*SHELL, command, *arguments],
            root=work_dir,
            data_dir=data_dir,
            jido_home=jido_home,
            additional_directories=additional_directories,
        )
    except PermissionDenied as exc:
        hint = exc.details.get("hint")
        ran.note = f"[the sandbox refused the check: {exc.message}]" + (f"\n[{hint}]" if hint else "")
        ran.mode = str(exc.details.get("sandbox", "refused"))
        return ran
    ran.mode = launch.mode
    try:
        result = await sandbox.run_command(
            launch.argv,
            cwd=launch.cwd,
            timeout_s=timeout_s,
            # the runner's own copy is not used (the caller keeps head and tail): keep it small
            output_cap=MIN_OUTPUT_CAP,
            env=launch.env,
            pass_fds=launch.pass_fds,
            graceful=launch.graceful_stop,
            info_fd=launch.info_fd,
            on_chunk=on_chunk,
            on_spawn=launch.attach,  # a protected path changed: put back, the check stopped
        )
        ran.exit_code = result["exit_code"]
    except RequestTimeout:
        ran.timed_out = True
        ran.note = f"[check timed out after {timeout_s:g} s; everything it started was killed]"
    except OSError as exc:  # the shell could not be started at all
        ran.note = f"[the check could not be started: {exc}]"
    finally:
        ran.repaired = await launch.close()
    if ran.repaired:
        ran.add_note(
            f"[sandbox: protected paths changed by the check were put back: {', '.join(ran.repaired)}; "
            "the check fails]"
        )
    return ran


async def _run_one(
    work_dir: str,
    command: str,
    *,
    timeout_s: float,
    output_cap: int,
    stream_cap: int,
    on_output: OnOutput | None,
    additional_directories: Sequence[str],
    jido_home: str | None,
    data_dir: str,
    arguments: Sequence[str] = (),
) -> CheckOutcome:
    """One check: run it, stream its output to ``on_output`` as it comes, and judge it."""
    started = time.monotonic()
    kept = HeadTail(output_cap)
    stream = _Stream(command, on_output, stream_cap) if on_output is not None else None

    def on_chunk(chunk: bytes) -> None:
        kept.feed(chunk)
        if stream is not None:
            stream.feed(chunk)

    try:
        ran = await _run_sandboxed(
            work_dir,
            command,
            on_chunk,
            timeout_s=timeout_s,
            additional_directories=additional_directories,
            jido_home=jido_home,
            data_dir=data_dir,
            arguments=arguments,
        )
        if stream is not None:
            if ran.note:
                stream.feed(("\n" + ran.note + "\n").encode())
            await stream.close()
    except BaseException:
        if stream is not None:
            stream.cancel()
        raise
    output, truncated = kept.text()
    if ran.note:
        output = f"{output}\n{ran.note}" if output else ran.note
    return CheckOutcome(
        command=command,
        exit_code=ran.exit_code,
        # a check that changed a protected path fails whatever it exited with (decision 0307)
        ok=ran.exit_code == 0 and not ran.timed_out and not ran.repaired,
        output=output,
        truncated=truncated,
        timed_out=ran.timed_out,
        duration_s=round(time.monotonic() - started, 3),
        sandbox=ran.mode,
    )


async def run_checks(
    work_dir: str,
    commands: Sequence[str],
    *,
    timeout_s: float = 600.0,
    output_cap: int = 65536,
    on_output: OnOutput | None = None,
    additional_directories: Sequence[str] = (),
    stream_cap: int = DEFAULT_STREAM_CAP,
    jido_home: str | None = None,
    data_dir: str = ".jido",
    arguments: Sequence[str] = (),
) -> QualityReport:
    """Each command with ``bash -c`` in ``work_dir`` under :func:`jidocode.shared.sandbox.prepare`,
    in order, all of them (a failing check does not skip the next).

    ``timeout_s`` and ``output_cap`` are per check; ``additional_directories`` are made visible
    (read-only) to the checks as the bash tool's are; ``jido_home`` (default: ``$JIDO_CODE_HOME``,
    else ``~/.jido_code``) and ``data_dir`` locate the settings that choose the sandbox, as for
    the bash tool, and the global layer is hidden from the checks. ``arguments`` follow each
    command as its positional parameters (``$1`` …; a notice's, :mod:`.notify`). An exception of ``on_output`` is
    raised once the check it came from has ended (the later checks do not run): the caller's
    reporting broke, not a check. A cancel stops the running check and everything it started.
    """
    _validate(work_dir, commands, timeout_s, output_cap, stream_cap, additional_directories)
    work_dir = os.path.abspath(work_dir)
    # as the tool runner does: the global layer is hidden from the check wherever it lives
    home = jido_home or str(default_jido_home())
    checks: list[CheckOutcome] = []
    for command in commands:
        checks.append(
            await _run_one(
                work_dir,
                command,
                timeout_s=timeout_s,
                output_cap=output_cap,
                stream_cap=stream_cap,
                on_output=on_output,
                additional_directories=tuple(additional_directories),
                jido_home=home,
                data_dir=data_dir,
                arguments=tuple(arguments),
            )
        )
    return QualityReport(checks)
