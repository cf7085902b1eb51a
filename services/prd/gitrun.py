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

:func:`run_git` starts the launch itself through :func:`jidocode.shared.gitbox.run_launch` (the
checkpoints' git runs the same way: ``git commit -F -`` needs stdin, ``-z`` listings need
stdout without stderr), which stops it as :func:`jidocode.shared.sandbox.run_command` does: a
bubblewrap call's pid namespace is ended by its first process, a Landlock launcher gets SIGTERM
(it kills what it started), then the group; ``launch.close()`` (the guard's repair of the
protected paths) is always awaited.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Final

from jidocode.shared import sandbox
from jidocode.shared.errors import PermissionDenied
from jidocode.shared.gitbox import DRIVER_KEYS, ENV_PROGRAM, GitRun, run_launch

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
        return await run_launch(launch, stdin, timeout_s)
    finally:
        await launch.close()
