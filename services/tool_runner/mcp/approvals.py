"""Which HTTP MCP servers of a project the user approved: a store outside every project.

An HTTP server of a project's ``.mcp.json`` is a URL the tool runner itself would request from
the host, so a model that can write that file (or a hostile repository) could make the runner
reach any address, around the sandbox's "no network". Such a server is therefore started only
once the user approved it, for that project root, that server name and that exact URL
(``jidocode mcp-servers approve <dir> <server>``); a changed URL needs a new approval. Servers of
the user's own global layer need none (docs/decisions/0302).

The store is one JSON file in the global home, beside the trust store, never in a project::

    <global home>/mcp_approvals.json
    {"version": 1, "approvals": {"/real/root": {"docs": {"url": "https://…", "approved_at": "…"}}}}

Reading never raises: a store that is missing, unreadable or invalid approves nothing (fail
closed). Writes take a lock file and replace the store atomically (mode 0600).
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final

from pydantic import BaseModel, ConfigDict

from jidocode.shared.errors import InvalidInput
from jidocode.shared.natsserver import write_private
from jidocode.shared.trust import locked

__all__ = [
    "APPROVALS_FILE",
    "Approval",
    "approval_store_path",
    "approvals",
    "approve_server",
    "awaiting_message",
    "is_approved",
    "revoke_server",
]

APPROVALS_FILE: Final = "mcp_approvals.json"
#: A store larger than this is not read (it approves nothing).
MAX_STORE_BYTES: Final = 1024 * 1024
_VERSION: Final = 1

_Store = dict[str, dict[str, dict[str, str]]]


class Approval(BaseModel):
    """One approved server: the project root (a realpath), its name, the URL the user saw."""

    model_config = ConfigDict(frozen=True)

    root: str
    server: str
    url: str
    approved_at: str = ""


def approval_store_path(home: Path) -> Path:
    """``<home>/mcp_approvals.json``; ``home`` is the global home (``settings.global_home()``)."""
    return home / APPROVALS_FILE


def awaiting_message(root: str, server: str, url: str) -> str:
    """What a server awaiting approval says: the URL it would request, the command approving it."""
    return (
        f"the project's HTTP MCP server {server!r} would connect to {url}; it awaits your approval: "
        f"run `jidocode mcp-servers approve {root} {server}`"
    )


def _real(root: str | os.PathLike[str]) -> str:
    return os.path.realpath(os.path.expanduser(os.fspath(root)))


def _entries(value: Any) -> _Store:
    """The well-formed part of a decoded store: ``{root: {server: {"url": …, …}}}``."""
    found = value.get("approvals") if isinstance(value, dict) else None
    if not isinstance(found, dict):
        return {}
    store: _Store = {}
    for root, servers in found.items():
        if not isinstance(root, str) or not isinstance(servers, dict):
            continue
        kept = {
            name: {k: v for k, v in entry.items() if isinstance(v, str)}
            for name, entry in servers.items()
            if isinstance(name, str) and isinstance(entry, dict) and isinstance(entry.get("url"), str)
        }
        if kept:
            store[root] = kept
    return store


def _read(store: Path) -> tuple[_Store, str | None]:
    """The stored approvals, and the problem when the store is unusable (then ``{}``)."""
    try:
        with open(store, "rb") as fh:
            raw = fh.read(MAX_STORE_BYTES + 1)
    except FileNotFoundError:
        return {}, None
    except OSError as exc:
        return {}, f"cannot read {store}: {exc.strerror or exc}"
    if len(raw) > MAX_STORE_BYTES:
        return {}, f"{store} is larger than {MAX_STORE_BYTES} bytes, not read"
    if not raw.strip():
        return {}, None
    try:
        value = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        return {}, f"{store} is not valid JSON ({type(exc).__name__})"
    return _entries(value), None


def is_approved(root: str | os.PathLike[str], server: str, url: str, *, home: Path) -> bool:
    """Whether the user approved ``server`` of the project ``root`` at exactly ``url`` (never raises)."""
    store, _ = _read(approval_store_path(home))
    entry = store.get(_real(root), {}).get(server)
    return entry is not None and entry.get("url") == url


def approvals(*, home: Path) -> list[Approval]:
    """Every stored approval, sorted by root and server."""
    store, _ = _read(approval_store_path(home))
    return [
        Approval(root=root, server=name, url=entry["url"], approved_at=entry.get("approved_at", ""))
        for root, servers in sorted(store.items())
        for name, entry in sorted(servers.items())
    ]


@contextlib.contextmanager
def _locked(store: Path) -> Iterator[_Store]:
    """The store's content under its lock file; :class:`InvalidInput` when it is unusable."""
    with locked(store):
        content, problem = _read(store)
        if problem is not None:
            raise InvalidInput(f"the MCP approval store is unusable, fix or remove it first: {problem}")
        yield content


def _write(store: Path, content: _Store) -> None:
    body = {"version": _VERSION, "approvals": dict(sorted(content.items()))}
    write_private(store, json.dumps(body, indent=2) + "\n")


def approve_server(root: str | os.PathLike[str], server: str, url: str, *, home: Path) -> Approval:
    """Record that the user approved ``server`` of ``root`` at ``url`` (replacing an older URL)."""
    real = _real(root)
    if not os.path.isdir(real):
        raise InvalidInput(f"not a directory: {real}", details={"root": real})
    now = datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")
    store = approval_store_path(home)
    with _locked(store) as content:
        content.setdefault(real, {})[server] = {"url": url, "approved_at": now}
        _write(store, content)
    return Approval(root=real, server=server, url=url, approved_at=now)


def revoke_server(root: str | os.PathLike[str], server: str, *, home: Path) -> bool:
    """Forget the approval of ``server`` of ``root``; whether there was one."""
    real = _real(root)
    store = approval_store_path(home)
    with _locked(store) as content:
        servers = content.get(real, {})
        if servers.pop(server, None) is None:
            return False
        if not servers:
            content.pop(real, None)
        _write(store, content)
    return True
