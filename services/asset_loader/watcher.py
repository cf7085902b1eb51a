"""Hot reload (seed 000 ``Watcher``): watch the asset folders of every layer, debounced.

Only asset files matter: ``skills/``, ``commands/``, ``workflows/``,
``skill_graph/``, ``settings.json`` and ``JIDO.md`` of each layer. The data
dir's ``state/`` (written by other services) and editor droppings are
ignored, so a reload never triggers another one.

:func:`asset_changes` names what a burst changed (path, layer, kind) for the
``assets.changed`` signal the service publishes before the reload.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Final, Literal

from watchfiles import Change, DefaultFilter, awatch

from jidocode.services.asset_loader.layout import ASSET_DIRS, Layer
from jidocode.shared.events.assets import AssetChange

__all__ = ["DEFAULT_DEBOUNCE_MS", "AssetFilter", "asset_changes", "watch_layers"]

log = logging.getLogger("jidocode.asset_loader.watcher")

#: How long a burst of changes must be quiet before one reload.
DEFAULT_DEBOUNCE_MS: Final = 50
#: ``trusted_projects.json`` (the global home's trust store): trusting a project reloads its settings.
_FILES: Final = {"settings.json", "JIDO.md", "trusted_projects.json"}
#: The ``kind`` of a changed file, by its first path part inside its layer.
_KINDS: Final = {
    "skills": "skill",
    "commands": "command",
    "workflows": "workflow",
    "skill_graph": "skill_graph",
    "settings.json": "settings",
    "JIDO.md": "instructions",
    "trusted_projects.json": "trust",
}
_CHANGES: Final[dict[Change, Literal["added", "modified", "deleted"]]] = {
    Change.added: "added",
    Change.modified: "modified",
    Change.deleted: "deleted",
}


class AssetFilter(DefaultFilter):
    """Accept changes to asset files of the given layer folders only."""

    def __init__(self, layer_paths: list[Path]) -> None:
        super().__init__()
        self._bases = [str(p) for p in layer_paths]

    def __call__(self, change: Change, path: str) -> bool:
        if not super().__call__(change, path):
            return False
        for base in self._bases:
            if path == base or not path.startswith(base + "/"):
                continue
            rel = path[len(base) + 1 :]
            head = rel.split("/", 1)[0]
            if head in ASSET_DIRS or rel in _FILES:
                return True
        return False


async def watch_layers(
    layers: list[Layer],
    on_change: Callable[[set[tuple[Change, str]]], Awaitable[None]],
    stop: asyncio.Event,
    *,
    debounce_ms: int = DEFAULT_DEBOUNCE_MS,
    ready: asyncio.Event | None = None,
) -> None:
    """Call ``on_change`` after each debounced burst of asset changes, until ``stop``.

    Layer folders that do not exist are not watched (``ensure_layout`` makes
    the project data dir before this starts).
    """
    paths = [layer.path for layer in layers if layer.path.is_dir()]
    if not paths:
        if ready is not None:
            ready.set()
        await stop.wait()
        return
    watch_filter = AssetFilter([p.resolve() for p in paths] + paths)
    watcher = awatch(
        *paths,
        watch_filter=watch_filter,
        debounce=debounce_ms,
        step=10,
        stop_event=stop,
        yield_on_timeout=True,
        rust_timeout=200,
    )
    first = True
    async for changes in watcher:
        if first and ready is not None:
            ready.set()
            first = False
        if not changes:
            continue
        try:
            await on_change(changes)
        except Exception:  # a failed reload must not end the watcher
            log.exception("reload after a file change failed")


def asset_changes(changes: set[tuple[Change, str]], layers: list[Layer]) -> list[AssetChange]:
    """The asset files of a burst, sorted by path (then change), each with its layer and kind.

    A file both added and modified in one burst is named once per change. A path is matched against each layer folder as given and resolved (the
    watcher may report either); one under no layer, or not an asset file, is left out.
    """
    bases: list[tuple[str, Layer]] = []
    for layer in layers:
        for base in {str(layer.path), str(layer.path.resolve())}:
            bases.append((base, layer))
    found: dict[tuple[str, str], AssetChange] = {}
    for change, path in changes:
        for base, layer in bases:
            if not path.startswith(base + "/"):
                continue
            rel = path[len(base) + 1 :]
            head = rel.split("/", 1)[0]
            kind = _KINDS.get(head) if head in ASSET_DIRS or rel in _FILES else None
            if kind is not None:
                what = _CHANGES[change]
                found[(path, what)] = AssetChange(change=what, path=path, layer=layer.name, kind=kind)
                break
    return [found[key] for key in sorted(found)]
