"""The asset store: the current :class:`Generation` of one project, replaced atomically.

Readers take ``store.current`` once and work on that immutable value, so a
reload in between never shows them a half-loaded state. ``swap`` is a single
reference assignment. Queries are pure functions of a generation.
"""

from __future__ import annotations

import builtins
from typing import Any, Literal

from jidocode.shared.errors import InvalidInput, NotFound

from .fuzzy import rank_by
from .generation import Generation
from .models import AssetKind

__all__ = ["KINDS", "AssetStore", "get_asset", "list_assets", "search_assets", "summary"]

KINDS: tuple[AssetKind, ...] = ("skill", "command", "workflow")
MAX_SEARCH_LIMIT = 100


def _table(gen: Generation, kind: str) -> dict[str, Any]:
    if kind == "skill":
        return gen.skills
    if kind == "command":
        return gen.commands
    if kind == "workflow":
        return gen.workflows
    raise InvalidInput(
        f"unknown asset type {kind!r}: expected skill, command or workflow", details={"type": kind}
    )


def summary(kind: str, asset: Any) -> dict[str, Any]:
    """The short form used by ``list`` and ``search``."""
    out: dict[str, Any] = {
        "type": kind,
        "name": asset.name,
        "description": asset.description,
        "layer": asset.layer,
    }
    out["path"] = asset.path
    if kind == "skill":
        out["routes"] = [r.path for r in asset.router]
    return out


def get_asset(gen: Generation, kind: str, name: str) -> dict[str, Any]:
    asset = _table(gen, kind).get(name)
    if asset is None:
        raise NotFound(f"no {kind} named {name!r}", details={"type": kind, "name": name})
    return {"type": kind, **asset.model_dump(mode="json")}


def list_assets(gen: Generation, kind: str | None = None) -> list[dict[str, Any]]:
    kinds = KINDS if kind is None else (kind,)
    return [summary(k, a) for k in kinds for a in _table(gen, k).values()]


def search_assets(
    gen: Generation, query: str, kind: str | None = None, limit: int = 20
) -> list[dict[str, Any]]:
    if not 1 <= limit <= MAX_SEARCH_LIMIT:
        raise InvalidInput(f"limit must be 1..{MAX_SEARCH_LIMIT}", details={"limit": limit})
    kinds = KINDS if kind is None else (kind,)
    items = [(summary(k, a), a.name, a.description) for k in kinds for a in _table(gen, k).values()]
    return [{**item, "score": round(score, 3)} for item, score in rank_by(query, items, limit=limit)]


class AssetStore:
    """Holds the current generation of one project."""

    def __init__(self, initial: Generation | None = None) -> None:
        self._current = initial or Generation()

    @property
    def current(self) -> Generation:
        return self._current

    def swap(self, generation: Generation) -> Generation:
        """Install ``generation`` (all or nothing) and return the one it replaced."""
        previous, self._current = self._current, generation
        return previous

    def get(self, kind: Literal["skill", "command", "workflow"], name: str) -> dict[str, Any]:
        return get_asset(self._current, kind, name)

    def list(self, kind: str | None = None) -> builtins.list[dict[str, Any]]:
        return list_assets(self._current, kind)

    def search(self, query: str, kind: str | None = None, limit: int = 20) -> builtins.list[dict[str, Any]]:
        return search_assets(self._current, query, kind, limit)
