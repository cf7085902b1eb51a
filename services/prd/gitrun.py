"""Git in the OS sandbox (decision 0300): the launch, the pins, stdout and stderr apart, stdin.

A repository is hostile input: its configuration (``.git/config`` and what it includes) can name
programs (filters, diff and merge drivers, hooks, fsmonitor, an ssh command …) that git runs
while it works. So every git command the PRD loop runs on a project runs through
:func:`jidocode.shared.sandbox.prepare`, like a bash call: the project root is the only writable
place (a worktree lies under it and its git dir is the root's ``.git``), no network, the
environment scrubbed (no service secret), the home empty. Inside, ``/usr/bin/env`` sets what
the sandbox's own allowlist would drop (under bubblewrap the environment is baked into the
command line): no system or global git configuration, no repository discovery above the root,
the author, and the pins (:func:`pins`) on git's command layer, which wins over every file:

- :data:`~jidocode.shared.sandbox.GIT_PINS` and the loop's own (:data:`LOOP_PINS`): hooks,
  fsmonitor, pager, editors, askpass, credentials, ssh, gpg, the attributes file, submodules
  never recursed into, no transport at all, no automatic gc;
- :func:`driver_pins`: every filter, diff and merge driver the repository's configuration
  defines (listed by ``git config --list --name-only -z`` in the sandbox first) set to a value
  that runs nothing. ``include.path`` and ``includeIf`` cannot be unset on the command line;
  the listing follows them, so what they define is pinned too.

:func:`run_git` starts the launch itself (``git commit -F -`` needs stdin, ``-z`` listings need
stdout without stderr) and stops it as :func:`jidocode.shared.sandbox.run_command` does: a
bubblewrap call's pid namespace is ended by its first process, a Landlock launcher gets SIGTERM
(it kills what it started), then the group; ``launch.close()`` (the guard's repair of the
protected paths) is always awaited.
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
    "LOOP_PINS",
    "SHELL",
    "GitRun",
    "driver_pins",
    "git_argv",
    "protected_changes",
    "run_git",
]

#: The program that sets the variables inside the sandbox (an absolute path: the Landlock
#: launcher execs it without a ``PATH`` search).
ENV_PROGRAM: Final = "/usr/bin/env"
#: The shell that reads a secret pin's value from standard input (:func:`git_argv`'s ``secret_key``).
SHELL: Final = "/bin/sh"
#: Pins of the loop's own git on top of :data:`~jidocode.shared.sandbox.GIT_PINS` (those reach
#: every sandboxed command; these would change what a model's own ``git`` shows).
LOOP_PINS: Final[tuple[tuple[str, str], ...]] = (
    ("commit.gpgSign", "false"),
    ("tag.gpgSign", "false"),
    ("log.showSignature", "false"),
    ("core.attributesFile", "/dev/null"),
    ("submodule.recurse", "false"),
    ("diff.ignoreSubmodules", "all"),
    ("status.submoduleSummary", "false"),
    ("fetch.recurseSubmodules", "false"),
    ("protocol.allow", "never"),
    ("protocol.file.allow", "never"),
    ("gc.auto", "0"),
    ("maintenance.auto", "false"),
)
#: For each section whose subsections name drivers: the keys that run a program, and the value
#: that runs nothing. A filter's empty ``clean``/``smudge``/``process`` is skipped by git
#: (``cmd && *cmd`` in convert.c) and ``required=false`` keeps it from failing the command; a
#: text conversion becomes ``cat`` (the bytes as they are); a driver's external diff becomes
#: the pinned ``diff.external``; a merge driver ``false`` (a conflict, never a program of the
#: repository's).
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
    ("GIT_OPTIONAL_LOCKS", "0"),
    ("GIT_NO_LAZY_FETCH", "1"),
    ("GIT_ASKPASS", ""),
    ("SSH_ASKPASS", ""),
    ("LC_ALL", "C"),
)
T = TypeVar("T")

#: How long a Landlock launcher or a bubblewrap set-up gets to end before its group is killed.
_STOP_GRACE_S: Final = 5.0


@dataclass(frozen=True)
class GitRun:
    """What one git command gave: its exit status, stdout (bytes) and stderr (text)."""

    code: int
    out: bytes
    err: str


# --- pure parts -----------------------------------------------------------------------------------


def driver_pins(listing: bytes) -> tuple[tuple[str, str], ...]:
    """The pins that turn off every driver a ``git config --list --name-only -z`` listing defines.

    A name is ``section.subsection.key``; the subsection (the driver's name, case kept) may hold
    dots and ``=``. Every program key of :data:`DRIVER_KEYS` is pinned for each driver named,
    whichever of its keys the listing has. Sorted, without duplicates.
    """
    out: set[tuple[str, str]] = set()
    for raw in listing.split(b"\0"):
        name = raw.decode("utf-8", "surrogateescape").strip("\n")
        section, dot, rest = name.partition(".")
        driver, dot2, _key = rest.rpartition(".")
        keys = DRIVER_KEYS.get(section.lower())
        if not dot or not dot2 or not driver or keys is None:
            continue
        out.update((f"{section.lower()}.{driver}.{key}", value) for key, value in keys)
    return tuple(sorted(out))


def git_argv(
    args: Sequence[str],
    *,
    pins: Iterable[tuple[str, str]],
    env: Mapping[str, str] = {},
    secret_key: str = "",
) -> list[str]:
    """``/usr/bin/env <fixed> <pins as GIT_CONFIG_*> <env> git --no-pager <args>`` (pure).

    The pins travel as ``GIT_CONFIG_KEY_<n>``/``GIT_CONFIG_VALUE_<n>`` (git's command layer): a
    key and its value apart, so a driver named with ``=`` is pinned too (``-c`` would split it).
    ``secret_key``: one more pin whose value is not in the command line: ``/bin/sh`` reads it
    from the first line of standard input into the environment, then runs the rest.
    """
    pairs = list(_FIXED_ENV)
    pinned = list(pins)
    secret = len(pinned)
    pairs.append(("GIT_CONFIG_COUNT", str(secret + 1 if secret_key else secret)))
    for i, (key, value) in enumerate(pinned):
        pairs += [(f"GIT_CONFIG_KEY_{i}", key), (f"GIT_CONFIG_VALUE_{i}", value)]
    if secret_key:
        pairs.append((f"GIT_CONFIG_KEY_{secret}", secret_key))
    for name, value in env.items():
        if not name or "=" in name or "\0" in name + value:
            raise ValueError(f"not an environment variable: {name!r}")
        pairs.append((name, value))
    argv = [ENV_PROGRAM, *(f"{k}={v}" for k, v in pairs), "git", "--no-pager", *args]
    if not secret_key:
        return argv
    name = f"GIT_CONFIG_VALUE_{secret}"
    script = f'IFS= read -r {name} || exit 125; export {name}; exec "$@"'
    return [SHELL, "-c", script, "sh", *argv]


def protected_changes(paths: Iterable[str], protected: Iterable[str]) -> list[str]:
    """The ``paths`` (relative, as git names them) that are or lie under a ``protected`` path.

    Compared by components; a path that names a protected one with a different case is counted
    too (a case-insensitive file system would write the protected file). Sorted, unique.
    """
    rels = [tuple(p.lower().split("/")) for p in protected]
    hits = set()
    for path in paths:
        parts = tuple(path.lower().strip("/").split("/"))
        if any(parts[: len(r)] == r for r in rels):
            hits.add(path)
    return sorted(hits)


# --- running --------------------------------------------------------------------------------------


async def run_git(
    argv: list[str],
    *,
    root: str,
    cwd: str,
    stdin: bytes | None,
    timeout_s: float,
    source_env: Mapping[str, str],
    jido_home: str | None,
    data_dir: str,
    additional_directories: Sequence[str] = (),
    egress: sandbox.Egress | None = None,
) -> GitRun:
    """Run ``argv`` (from :func:`git_argv`) in the sandbox of the project ``root``, starting in ``cwd``
    (``additional_directories`` are visible, read-only: the project a push reads from; ``egress``:
    the proxy it may reach, else no network).

    Raises :class:`PermissionDenied` when no sandbox can run it (the user did not turn the
    sandbox off), :class:`RequestTimeout` after ``timeout_s`` (everything it started is
    stopped), :class:`OSError` when it could not start. A cancel stops it before it is raised.
    """
    try:
        launch = await sandbox.prepare(
            argv,
            root=root,
            cwd=cwd,
            data_dir=data_dir,
            jido_home=jido_home,
            source_env=source_env,
            additional_directories=additional_directories,
            egress=egress,
        )
    except PermissionDenied as exc:
        reason = exc.message.replace("bash is refused", "git is refused", 1)
        raise PermissionDenied(
            f"the PRD loop's git cannot run on {root}: {reason}", details=exc.details
        ) from None
    try:
        return await _run_launch(launch, stdin, timeout_s)
    finally:
        await launch.close()


async def _run_launch(launch: sandbox.Launch, stdin: bytes | None, timeout_s: float) -> GitRun:
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
    """End a git command still running and everything it started, then reap it."""
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
    """``work``'s result, awaited to its end however often the caller is cancelled meanwhile,
    and whether it was (starting or stopping a sandboxed process must not be left half-done)."""
    cancelled = False
    while True:
        try:
            return await asyncio.shield(work), cancelled
        except asyncio.CancelledError:
            if work.cancelled():
                raise
            cancelled = True
