"""Git on hostile content, in the OS sandbox: the pinned environment and the sandboxed run.

A work tree is hostile input (decisions 0300, 0334): its configuration, attributes and hooks can
name programs git would run. Every git command here runs through
:func:`jidocode.shared.sandbox.prepare` (no network, scrubbed environment, empty home, only the
sandbox root writable) and ``/usr/bin/env`` sets, inside, what turns every program off on git's
command layer (which wins over every file): :data:`PINS` (hooks, fsmonitor, pager, editors,
askpass, credentials, ssh, gpg, the attributes file, submodules, transports, gc) on top of
:data:`~jidocode.shared.sandbox.GIT_PINS`, no system or global configuration, ``LC_ALL=C``.

The checkpoint store (``services/tool_runner/checkpoints``) runs git with its own repository as
the sandbox root (the only writable place) and the project as a read-only additional directory:
the project's ``.git`` is never its repository, so no ``.git/config`` of the project is read at
all; a ``.gitattributes`` in the work tree is still read by git, so every filter and driver is
pinned off by its name as well (:func:`driver_pins`). The PRD loop's ``services/prd/gitrun.py``
holds the same rules for the project's own repository; this module is their shared form.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Final, TypeVar

from jidocode.shared import sandbox
from jidocode.shared.errors import PermissionDenied, RequestTimeout

__all__ = [
    "DRIVER_KEYS",
    "ENV_PROGRAM",
    "PINS",
    "GitRun",
    "driver_pins",
    "git_env",
    "run_launch",
    "run_sandboxed",
]

#: The program that sets the variables inside the sandbox (an absolute path: the Landlock
#: launcher execs it without a ``PATH`` search).
ENV_PROGRAM: Final = "/usr/bin/env"
#: Pins on top of :data:`~jidocode.shared.sandbox.GIT_PINS` (those reach every sandboxed command).
PINS: Final[tuple[tuple[str, str], ...]] = (
    ("commit.gpgSign", "false"),
    ("tag.gpgSign", "false"),
    ("log.showSignature", "false"),
    ("core.attributesFile", "/dev/null"),
    ("core.fsmonitor", "false"),
    ("core.hooksPath", "/dev/null"),
    ("core.symlinks", "true"),
    ("core.autocrlf", "false"),
    ("core.safecrlf", "false"),
    ("core.untrackedCache", "false"),
    ("core.quotePath", "false"),
    ("submodule.recurse", "false"),
    ("diff.ignoreSubmodules", "all"),
    ("protocol.allow", "never"),
    ("protocol.file.allow", "never"),
    ("gc.auto", "0"),
    ("maintenance.auto", "false"),
)
#: For each section whose subsections name drivers: the keys that run a program, and the value
#: that runs nothing (an empty filter command is skipped by git, ``required=false`` keeps it from
#: failing; a text conversion becomes ``cat``; a merge driver ``false``).
DRIVER_KEYS: Final[dict[str, tuple[tuple[str, str], ...]]] = {
    "filter": (("clean", ""), ("smudge", ""), ("process", ""), ("required", "false")),
    "diff": (("textconv", "cat"), ("command", dict(sandbox.GIT_PINS)["diff.external"])),
    "merge": (("driver", "false"),),
}
#: Variables set inside the sandbox for every git command.
_FIXED_ENV: Final[tuple[tuple[str, str], ...]] = (
    ("GIT_CONFIG_NOSYSTEM", "1"),
    ("GIT_CONFIG_GLOBAL", "/dev/null"),
    ("GIT_TERMINAL_PROMPT", "0"),
    ("GIT_NO_LAZY_FETCH", "1"),
    ("GIT_ASKPASS", ""),
    ("SSH_ASKPASS", ""),
    ("LC_ALL", "C"),
)
#: How long a Landlock launcher or a bubblewrap set-up gets to end before its group is killed.
_STOP_GRACE_S: Final = 5.0
T = TypeVar("T")


@dataclass(frozen=True)
class GitRun:
    """What one command gave: its exit status, stdout (bytes) and stderr (text)."""

    code: int
    out: bytes
    err: str


def driver_pins(names: Iterable[str]) -> tuple[tuple[str, str], ...]:
    """The pins that turn off the filter, diff and merge drivers called ``names`` (sorted, unique)."""
    out = {
        (f"{section}.{name}.{key}", value)
        for name in names
        if name and "\0" not in name and "\n" not in name
        for section, keys in DRIVER_KEYS.items()
        for key, value in keys
    }
    return tuple(sorted(out))


def git_env(*, pins: Iterable[tuple[str, str]] = (), env: Mapping[str, str] = {}) -> list[str]:
    """``/usr/bin/env <fixed> <pins as GIT_CONFIG_*> <env>`` (pure): the prefix of a command.

    The pins travel as ``GIT_CONFIG_KEY_<n>``/``GIT_CONFIG_VALUE_<n>`` (git's command layer): a key
    and its value apart, so a driver named with ``=`` is pinned too.
    """
    pairs = list(_FIXED_ENV)
    pinned = [*sandbox.GIT_PINS, *PINS, *pins]
    pairs.append(("GIT_CONFIG_COUNT", str(len(pinned))))
    for i, (key, value) in enumerate(pinned):
        pairs += [(f"GIT_CONFIG_KEY_{i}", key), (f"GIT_CONFIG_VALUE_{i}", value)]
    for name, value in env.items():
        if not name or "=" in name or "\0" in name + value:
            raise ValueError(f"not an environment variable: {name!r}")
        pairs.append((name, value))
    return [ENV_PROGRAM, *(f"{k}={v}" for k, v in pairs)]


async def run_sandboxed(
    argv: Sequence[str],
    *,
    root: str,
    read_only: Sequence[str] = (),
    stdin: bytes | None,
    timeout_s: float,
    source_env: Mapping[str, str],
    jido_home: str | None,
    what: str,
) -> GitRun:
    """Run ``argv`` (starting with :func:`git_env`) in the sandbox whose writable root is ``root``,
    the directories ``read_only`` readable too.

    Raises :class:`PermissionDenied` when no sandbox can run it (``what`` names the caller),
    :class:`RequestTimeout` after ``timeout_s`` (everything it started is stopped), ``OSError``
    when it could not start. A cancel stops it before it is raised.
    """
    try:
        launch = await sandbox.prepare(
            list(argv),
            root=root,
            cwd=root,
            jido_home=jido_home,
            additional_directories=tuple(read_only),
            source_env=source_env,
        )
    except PermissionDenied as exc:
        reason = exc.message.replace("bash is refused", "git is refused", 1)
        raise PermissionDenied(f"{what} cannot run git: {reason}", details=exc.details) from None
    try:
        return await run_launch(launch, stdin, timeout_s)
    finally:
        await launch.close()


async def run_launch(launch: sandbox.Launch, stdin: bytes | None, timeout_s: float) -> GitRun:
    loop = asyncio.get_running_loop()
    spawn = asyncio.ensure_future(
        asyncio.create_subprocess_exec(
            *launch.argv,
            cwd=launch.cwd,
            env=launch.env,
            stdin=asyncio.subprocess.DEVNULL if stdin is None else asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            start_new_session=True,
            pass_fds=launch.pass_fds,
        )
    )
    proc, cancelled = await _to_the_end(spawn)
    namespace = None if launch.info_fd is None else sandbox.Namespace(loop, launch.info_fd, proc.pid)
    try:
        if cancelled:
            raise asyncio.CancelledError
        try:
            out, err = await asyncio.wait_for(proc.communicate(stdin), timeout_s)
        except TimeoutError:
            raise RequestTimeout(f"git did not finish within {timeout_s:g} s (stopped)") from None
        code = proc.returncode if proc.returncode is not None else -1
        return GitRun(code, out, err.decode("utf-8", "replace").strip())
    finally:
        if proc.returncode is None:
            _, again = await _to_the_end(asyncio.ensure_future(_stop(proc, launch, namespace)))
            if again:
                raise asyncio.CancelledError
        if namespace is not None:
            namespace.close()


async def _stop(
    proc: asyncio.subprocess.Process, launch: sandbox.Launch, namespace: sandbox.Namespace | None
) -> None:
    """End a command still running and everything it started, then reap it."""
    if namespace is not None:
        await namespace.end(proc, _STOP_GRACE_S)
    if launch.graceful_stop and proc.returncode is None:
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signal.SIGTERM)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(proc.wait()), timeout=_STOP_GRACE_S)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(ProcessLookupError):
        proc.kill()
    await proc.wait()


async def _to_the_end(work: asyncio.Future[T]) -> tuple[T, bool]:
    """``work``'s result, awaited to its end however often the caller is cancelled meanwhile, and
    whether it was (starting or stopping a sandboxed process must not be left half-done)."""
    cancelled = False
    while True:
        try:
            return await asyncio.shield(work), cancelled
        except asyncio.CancelledError:
            if work.cancelled():
                raise
            cancelled = True
