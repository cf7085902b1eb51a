"""Which project roots the user trusts: a store outside every project.

A project's own ``settings.json``, hooks and MCP servers take effect only when
the user trusts its root; until then its settings can only restrict (see
``shared/settings.py``). The store is one JSON file in the global home, never
in a project::

    <global home>/trusted_projects.json
    {"version": 1, "projects": {"/real/path/of/root": {"trusted_at": "2025-01-01T00:00:00Z"}}}

Keys are realpaths. A trusted directory covers the directories below it (as
an editor's workspace trust does), so ``/home/u/work`` trusts
``/home/u/work/app``; the filesystem root and the user's home directory
cannot be trusted as a whole. No content fingerprint is kept: trust is a
statement about who wrote the project, like an editor's trust dialog, and a
fingerprint of the settings would ask again after each edit the user makes
(docs/decisions/0130-project-trust.md).

Reading never raises: a store that is missing, unreadable or invalid trusts
nothing (fail closed) and says why in :attr:`TrustState.problem`. Writes take
a lock file and replace the store atomically (mode 0600).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final

from pydantic import BaseModel, ConfigDict

from jidocode.shared.errors import InvalidInput

__all__ = [
    "MAX_STORE_BYTES",
    "TRUST_FILE",
    "TrustEntry",
    "TrustState",
    "is_trusted",
    "locked",
    "trust_project",
    "trust_state",
    "trust_store_path",
    "trusted_projects",
    "untrust_project",
]

TRUST_FILE: Final = "trusted_projects.json"
#: A store larger than this is not read (it trusts nothing).
MAX_STORE_BYTES: Final = 1024 * 1024
_VERSION: Final = 1


class TrustEntry(BaseModel):
    """One trusted root as the store records it."""

    model_config = ConfigDict(frozen=True)

    root: str
    trusted_at: str = ""


class TrustState(BaseModel):
    """Whether ``root`` is trusted, through which entry, and where the store is."""

    model_config = ConfigDict(frozen=True)

    root: str
    trusted: bool
    #: The stored root that covers ``root`` (itself or a parent), when trusted.
    via: str | None = None
    store: str
    #: Why the store could not be read (then nothing is trusted).
    problem: str | None = None


def trust_store_path(home: Path) -> Path:
    """``<home>/trusted_projects.json``; ``home`` is the global home (``settings.global_home()``)."""
    return home / TRUST_FILE


def _real(root: str | os.PathLike[str]) -> str:
    return os.path.realpath(os.path.expanduser(os.fspath(root)))


def _read(store: Path) -> tuple[dict[str, dict[str, Any]], str | None]:
    """The stored projects, and the problem when the store is unusable (then ``{}``)."""
    try:
        with open(store, "rb") as fh:
            raw = fh.read(MAX_STORE_BYTES + 1)
    except FileNotFoundError:
        return {}, None
    except OSError as exc:
        return {}, f"cannot read {store}: {exc.strerror or exc}"
    if len(raw) > MAX_STORE_BYTES:
        return {}, f"{store} is larger than {MAX_STORE_BYTES} bytes, not read"
    try:
        value = json.loads(raw.decode("utf-8")) if raw.strip() else {}
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        return {}, f"{store} is not valid JSON ({type(exc).__name__})"
    projects = value.get("projects") if isinstance(value, dict) else None
    if projects is None and value == {}:
        return {}, None
    if not isinstance(projects, dict):
        return {}, f"{store}: 'projects' must be an object"
    return {k: (v if isinstance(v, dict) else {}) for k, v in projects.items() if isinstance(k, str)}, None


def _covering(real: str, projects: dict[str, dict[str, Any]]) -> str | None:
    """The stored root equal to ``real`` or the nearest parent of it."""
    path = Path(real)
    for candidate in (path, *path.parents):
        if str(candidate) in projects:
            return str(candidate)
    return None


def trust_state(root: str | os.PathLike[str], *, home: Path) -> TrustState:
    """Whether the user trusts ``root`` (never raises; an unreadable store trusts nothing)."""
    store = trust_store_path(home)
    real = _real(root)
    projects, problem = _read(store)
    via = _covering(real, projects)
    return TrustState(root=real, trusted=via is not None, via=via, store=str(store), problem=problem)


def is_trusted(root: str | os.PathLike[str], *, home: Path) -> bool:
    return trust_state(root, home=home).trusted


def trusted_projects(*, home: Path) -> list[TrustEntry]:
    """Every stored root, sorted."""
    projects, _ = _read(trust_store_path(home))
    return [
        TrustEntry(root=root, trusted_at=str(meta.get("trusted_at", "")))
        for root, meta in sorted(projects.items())
    ]


@contextlib.contextmanager
def locked(store: Path) -> Iterator[None]:
    """Hold ``store``'s lock (a ``.lock`` file beside it, 0600, in a 0700 folder) for the block:
    the one way the user's stores in the global home (trust, MCP approvals) are changed."""
    store.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd = os.open(store.with_name(store.name + ".lock"), os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the lock


def _write(store: Path, projects: dict[str, dict[str, Any]]) -> None:
    tmp = store.with_name(f".{store.name}.{os.getpid()}.tmp")
    data = json.dumps({"version": _VERSION, "projects": dict(sorted(projects.items()))}, indent=2) + "\n"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, store)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _refuse(real: str) -> None:
    if not os.path.isdir(real):
        raise InvalidInput(f"not a directory: {real}", details={"root": real})
    too_wide = {"/", _real(Path.home())}
    if real in too_wide:
        raise InvalidInput(
            f"{real} is too wide to trust as a whole: trust the project directory itself",
            details={"root": real},
        )


def trust_project(root: str | os.PathLike[str], *, home: Path) -> TrustState:
    """Record ``root`` (its realpath) as trusted. :class:`InvalidInput` for ``/``, ``~`` or a non-directory.

    A store that cannot be read is not overwritten (``InvalidInput`` naming it).
    """
    real = _real(root)
    _refuse(real)
    store = trust_store_path(home)
    with locked(store):
        projects, problem = _read(store)
        if problem is not None:
            raise InvalidInput(f"the trust store is unusable, fix or remove it first: {problem}")
        if real not in projects:
            now = datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")
            projects[real] = {"trusted_at": now}
            _write(store, projects)
    return trust_state(real, home=home)


def untrust_project(root: str | os.PathLike[str], *, home: Path) -> TrustState:
    """Remove ``root``'s own entry; the state after (a trusted parent may still cover it)."""
    real = _real(root)
    store = trust_store_path(home)
    with locked(store):
        projects, problem = _read(store)
        if problem is not None:
            raise InvalidInput(f"the trust store is unusable, fix or remove it first: {problem}")
        if projects.pop(real, None) is not None:
            _write(store, projects)
    return trust_state(real, home=home)
