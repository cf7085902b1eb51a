"""Which paths the sandbox protects, hides and lets the command read (pure, except where noted).

Protected paths are files that run later in the user's own tools, or decide
how git and JidoCode behave: a command may read them, never create or change
them. They are named relative to the project root.

Hidden paths (:func:`runtime_hidden`) are what no tool of any project may see,
whatever its settings add: JidoCode's data home (service credentials, the
gateway token, the NATS server's configuration with every service's password),
the JidoCode home (the global settings layer and the trust store) and the
credential files the runner was given by path. The OS sandbox and the file
tools (:class:`jidocode.shared.policy.PathSandbox`) use this one list.

What a sandboxed command reads is an allowlist, not "everything but the hidden
paths": its project root, the system's toolchain (:data:`SYSTEM_READABLE`, those
that exist) and the additional directories of the settings. Another project's
root is none of these, so one project's commands cannot read another's files.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable, Mapping, Sequence
from pathlib import PurePosixPath
from typing import Final

from jidocode.shared.config import default_data_home, default_jido_home

__all__ = [
    "PROC_READABLE",
    "PROTECTED",
    "SECRET_FILE_VARS",
    "SYSTEM_READABLE",
    "hidden_at",
    "hidden_paths",
    "link_files",
    "protected_rels",
    "read_cover",
    "readable_files",
    "runtime_hidden",
    "system_readable",
    "within",
]

#: Protected paths under the project root (the data dir is added by :func:`protected_rels`).
PROTECTED: Final[tuple[str, ...]] = (
    ".git/hooks",
    ".git/config",
    # git reads its configuration from the common dir, and from config.worktree, too
    ".git/commondir",
    ".git/config.worktree",
    ".gitmodules",
    ".jido_code",
    ".mcp.json",
    ".vscode",
    ".envrc",
    ".husky",
    ".github/workflows",
    ".claude",
)

#: What of ``/proc`` a Landlock-sandboxed command may read: system-wide files only. The
#: ``/proc/<pid>`` directories stay closed (another process's ``environ`` is readable by
#: the same user under Landlock; with bubblewrap the command has a ``/proc`` of its own).
PROC_READABLE: Final[tuple[str, ...]] = (
    "/proc/cpuinfo",
    "/proc/meminfo",
    "/proc/stat",
    "/proc/loadavg",
    "/proc/uptime",
    "/proc/version",
    "/proc/filesystems",
    "/proc/sys",
)


#: The system's directories a sandboxed command reads (read-only; those that exist): programs,
#: libraries, the dynamic loader, ``/etc`` (users, locale, certificates, resolver), toolchains
#: installed under ``/opt``, ``/nix/store`` or ``/snap``, and ``/sys``. Never the home
#: directories, ``/tmp``, ``/var``, ``/srv``, ``/mnt`` or ``/media``, where projects live.
SYSTEM_READABLE: Final[tuple[str, ...]] = (
    "/usr",
    "/bin",
    "/sbin",
    "/lib",
    "/lib32",
    "/lib64",
    "/libx32",
    "/etc",
    "/opt",
    "/nix/store",
    "/snap",
    "/sys",
)

#: Variables naming credential files the runner was given by path (hidden wherever they are).
SECRET_FILE_VARS: Final[tuple[str, ...]] = (
    "NATS_CREDS",
    "NATS_NKEY",
    "GOOGLE_APPLICATION_CREDENTIALS",
    "AWS_SHARED_CREDENTIALS_FILE",
)


def within(path: str, base: str) -> bool:
    """Whether ``path`` is ``base`` or under it (by components; both absolute and normalised)."""
    p, b = PurePosixPath(path).parts, PurePosixPath(base).parts
    return len(p) >= len(b) and p[: len(b)] == b


def protected_rels(data_dir: str = ".jido") -> tuple[str, ...]:
    """The protected paths relative to the root: :data:`PROTECTED` plus the project's data dir."""
    data = os.path.normpath(data_dir)
    if data in (".", "") or data.startswith(".."):
        return PROTECTED
    return (*PROTECTED, data) if data not in PROTECTED else PROTECTED


def hidden_paths(
    *, home: str | None, jido_home: str | None, data_home: str | None, secrets: Iterable[str] = ()
) -> tuple[str, ...]:
    """Absolute paths the command must not see: the home, the global layer, the data home, secrets.

    Relative or empty values and ``/`` are dropped (hiding ``/`` would hide
    everything); the result is sorted and without duplicates.
    """
    out: set[str] = set()
    for p in (home, jido_home, data_home, *secrets):
        if p and os.path.isabs(p):
            norm = os.path.normpath(p)
            if norm != "/":
                out.add(norm)
    return tuple(sorted(out))


def runtime_hidden(env: Mapping[str, str] | None = None, *, jido_home: str | None = None) -> tuple[str, ...]:
    """The one list of paths no tool may see (realpaths, sorted): the data home, the JidoCode home, secrets.

    ``jido_home`` defaults to the JidoCode home of this process (``$JIDO_CODE_HOME`` or
    ``~/.jido_code``), the data home is this process's (``$JIDO_DATA_HOME`` …); the
    credential files are the absolute paths in :data:`SECRET_FILE_VARS` of ``env``
    (default: this process's environment). Reads the environment and resolves links.
    """
    source = os.environ if env is None else env
    secrets = [source[name] for name in SECRET_FILE_VARS if os.path.isabs(source.get(name) or "")]
    try:
        data_home: str | None = str(default_data_home())
        own_home: str | None = jido_home or str(default_jido_home())
    except RuntimeError:  # no home directory to derive them from
        data_home, own_home = None, jido_home
    found = hidden_paths(home=None, jido_home=own_home, data_home=data_home, secrets=secrets)
    return tuple(sorted({os.path.realpath(p) for p in found} - {"/"}))


def hidden_at(path: str, hidden: Iterable[str], root: str) -> str | None:
    """The hidden path ``path`` lies under, or ``None``; the project ``root`` itself is never hidden.

    A root inside a hidden path (a worktree kept under the data home) stays
    visible, with everything below it; the rest of that hidden path does not.
    """
    for h in hidden:
        if within(path, h) and not (within(root, h) and within(path, root)):
            return h
    return None


def system_readable(extra: Iterable[str] = ()) -> list[str]:
    """:data:`SYSTEM_READABLE` and ``extra``, those that exist (reads the disk)."""
    return [p for p in (*SYSTEM_READABLE, *extra) if os.path.lexists(p)]


def read_cover(hidden: Iterable[str], top: str = "/") -> list[str]:
    """The fewest trees that cover everything under ``top`` except the ``hidden`` paths and ``/proc``.

    Landlock grants rights beneath a directory and cannot take a subtree out,
    so a hidden path is left out by granting each of its siblings instead,
    level by level. Symlinks are skipped (their target is covered where it
    lives); what cannot be listed is left out.
    """
    hide = {os.path.realpath(h) for h in hidden} | {"/proc"}
    out: list[str] = []

    def walk(d: str) -> None:
        if d in hide:
            return
        if not any(within(h, d) for h in hide):
            out.append(d)
            return
        try:
            names = sorted(os.listdir(d))
        except OSError:
            return
        for name in names:
            p = os.path.join(d, name)
            try:
                st = os.lstat(p)
            except OSError:
                continue
            if stat.S_ISLNK(st.st_mode):
                continue
            walk(p)

    walk(os.path.normpath(top))
    return out


def readable_files(files: Sequence[str], hidden: Sequence[str], root: str) -> tuple[tuple[str, str], ...]:
    """The ``files`` a launch may read: absolute, leading to a regular file that no hidden path
    holds; each with the file it leads to (a link is followed here, once)."""
    out: list[tuple[str, str]] = []
    for path in files:
        if not os.path.isabs(path):
            continue
        real = os.path.realpath(path)
        if os.path.isfile(real) and hidden_at(real, hidden, root) is None:
            out.append((os.path.normpath(path), real))
    return tuple(out)


def link_files(files: Sequence[tuple[str, str]], home: str | None, scratch_home: str) -> None:
    """Under Landlock: a link in the sandbox's home to each readable file of the user's home,
    at the same place (``~/.codex/auth.json``), so the command finds it under its own ``HOME``."""
    for path, real in files:
        if home is None or not within(path, home) or path == home:
            continue
        link = os.path.join(scratch_home, os.path.relpath(path, home))
        os.makedirs(os.path.dirname(link), mode=0o700, exist_ok=True)
        os.symlink(real, link)
