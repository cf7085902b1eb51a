"""Validation of what ``start_project`` is given: a root directory and a data dir name.

**Allowed roots.** A project root gives the model's tools a directory to work
in, so not every directory may be one (decision 0142). A root must lie under
an allowed root:

1. ``JIDO_ALLOWED_ROOTS`` (paths separated by ``:``), if set; else
2. ``projects.allowed_roots`` (a list) in the global settings
   (``<jido home>/settings.json``; a project's own settings cannot widen it); else
3. the default: anything under the user's home directory or a temporary
   directory (``/tmp``, ``/var/tmp``, ``$TMPDIR``) — strictly under: the
   default roots themselves are not projects, a configured root may be one.

Whatever is configured, these are never a project root: the filesystem root,
a bare home directory (``~`` itself, or any directory holding a user's home
directory: a project *inside* the home, like ``~/code/app``, is fine),
``/proc``, ``/sys``, ``/dev``, ``/etc``, ``/boot``, ``/run`` (and anything
under them), and a directory that is, lies inside or contains JidoCode's own
global layer (the JidoCode home) or data home: the project's tools write its
root, and those hold the global settings, the service credentials and every
service's password (decision 0303).
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Mapping
from pathlib import Path, PurePosixPath
from typing import Any, NamedTuple

from jidocode.shared.config import default_data_home, default_jido_home
from jidocode.shared.errors import InvalidInput, NotFound, PermissionDenied

__all__ = [
    "NEVER_UNDER",
    "AllowedRoots",
    "allowed_roots",
    "check_allowed",
    "validate_data_dir",
    "validate_root",
]

#: System trees no project root may be in (nor be).
NEVER_UNDER: tuple[str, ...] = ("/proc", "/sys", "/dev", "/etc", "/boot", "/run")
#: The variable listing the allowed roots (``:``-separated).
ENV_VAR = "JIDO_ALLOWED_ROOTS"


def _real(path: str | Path) -> str:
    return os.path.realpath(os.path.expanduser(str(path)))


def _under(path: str, root: str) -> bool:
    """``path`` is ``root`` or inside it, by path components."""
    return path == root or path.startswith(root.rstrip("/") + "/")


def _global_setting(jido_home: Path) -> list[str] | None:
    """``projects.allowed_roots`` of the global settings, when it is a list of strings."""
    try:
        raw = json.loads((jido_home / "settings.json").read_text())
    except (OSError, ValueError):
        return None
    projects = raw.get("projects") if isinstance(raw, dict) else None
    roots = projects.get("allowed_roots") if isinstance(projects, dict) else None
    if isinstance(roots, list) and all(isinstance(r, str) for r in roots):
        return roots
    return None


class AllowedRoots(NamedTuple):
    """Where project roots may be: inside ``roots`` (realpaths), or one of them when ``exact``."""

    roots: tuple[str, ...]
    exact: bool


def allowed_roots(environ: Mapping[str, str] | None = None, jido_home: Path | None = None) -> AllowedRoots:
    """The directories project roots may lie under (see the module docstring)."""
    env = os.environ if environ is None else environ
    configured: list[str] | None = None
    if env.get(ENV_VAR):
        configured = [p for p in env[ENV_VAR].split(os.pathsep) if p.strip()]
    else:
        configured = _global_setting(jido_home or default_jido_home())
    exact = configured is not None
    if configured is None:
        configured = [str(Path.home()), "/tmp", "/var/tmp", tempfile.gettempdir()]
    roots = tuple(dict.fromkeys(_real(p) for p in configured if os.path.isabs(os.path.expanduser(p))))
    return AllowedRoots(roots, exact)


def _homes() -> set[str]:
    """Home directories: this user's, and the usual parents of everyone's."""
    homes = {_real(Path.home()), "/home", "/root", "/Users"}
    return {h for h in homes if h}


def check_allowed(real: str, allowed: AllowedRoots) -> None:
    """``PermissionDenied`` unless the realpath ``real`` may be a project root under ``allowed``."""
    details = {"root_path": real, "allowed_roots": list(allowed.roots)}
    if real == "/":
        raise InvalidInput("the filesystem root cannot be a project", details=details)
    for system in NEVER_UNDER:
        if _under(real, _real(system)) or _under(real, system):
            raise PermissionDenied(
                f"{real!r} is a system directory ({system}): never a project root", details=details
            )
    if real in _homes() or _under(_real(Path.home()), real):
        raise PermissionDenied(
            f"{real!r} is or contains a home directory ({_real(Path.home())}): open a project inside it",
            details=details,
        )
    _check_own_data(real, details)
    if not any(_under(real, root) and (allowed.exact or real != root) for root in allowed.roots):
        raise PermissionDenied(
            f"{real!r} is not under an allowed project root ({', '.join(allowed.roots) or 'none'}); "
            f"allow more with {ENV_VAR} or projects.allowed_roots in the global settings.json",
            details=details,
        )


def _check_own_data(real: str, details: dict[str, Any]) -> None:
    """``PermissionDenied`` when ``real`` is, lies inside or contains the JidoCode home or the data home."""
    for what, own in (
        ("the JidoCode home (global settings)", _real(default_jido_home())),
        ("JidoCode's data home (service credentials)", _real(default_data_home())),
    ):
        if _under(real, own):
            raise PermissionDenied(f"{real!r} is inside {what} {own}: never a project root", details=details)
        if _under(own, real):
            raise PermissionDenied(
                f"{real!r} contains {what} {own}: never a project root (its tools would write there); "
                "open a project that does not hold it",
                details=details,
            )


def validate_root(root_path: str, allowed: AllowedRoots | None = None) -> str:
    """The realpath of ``root_path`` if it is an existing directory under an allowed root.

    The engine runs in its own process and working directory, so relative
    paths are refused: the client resolves them first. ``allowed`` defaults to
    :func:`allowed_roots` (read at each call, so a settings change applies at once).
    """
    if not isinstance(root_path, str) or not root_path.strip():
        raise InvalidInput(
            "root_path is empty: give the project's directory", details={"root_path": root_path}
        )
    if "\x00" in root_path:
        raise InvalidInput("root_path contains a NUL byte", details={"root_path": root_path})
    if not os.path.isabs(root_path):
        raise InvalidInput(
            f"root_path {root_path!r} is relative: send an absolute path", details={"root_path": root_path}
        )
    real = os.path.realpath(root_path)
    if real == "/":
        raise InvalidInput("the filesystem root cannot be a project", details={"root_path": root_path})
    if not os.path.exists(real):
        raise NotFound(f"project root {root_path!r} does not exist", details={"root_path": root_path})
    if not os.path.isdir(real):
        raise InvalidInput(
            f"project root {root_path!r} is a file, not a directory",
            details={"root_path": root_path, "realpath": real},
        )
    check_allowed(real, allowed_roots() if allowed is None else allowed)
    return real


def validate_data_dir(data_dir: str) -> str:
    """A data dir is one relative path inside the root, ``.jido`` by default."""
    pure = PurePosixPath(data_dir)
    if not data_dir or pure.is_absolute() or ".." in pure.parts or "\x00" in data_dir:
        raise InvalidInput(
            f"data_dir {data_dir!r} must be a relative path inside the project root",
            details={"data_dir": data_dir},
        )
    return str(pure)
