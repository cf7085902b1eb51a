"""Hot reload (seed 000 ``Watcher``): watch the asset folders of every layer, debounced.

Only asset files matter: ``skills/``, ``commands/``, ``workflows/``,
``skill_graph/``, ``settings.json`` and ``JIDO.md`` of each layer. The data
dir's ``state/`` (written by other services) and editor droppings are
ignored, so a reload never triggers another one.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Final

from watchfiles import Change, DefaultFilter, awatch

from jidocode.services.asset_loader.layout import ASSET_DIRS, Layer

__all__ = ["DEFAULT_DEBOUNCE_MS", "AssetFilter", "watch_layers"]

log = logging.getLogger("jidocode.asset_loader.watcher")

#: How long a burst of changes must be quiet before one reload.
DEFAULT_DEBOUNCE_MS: Final = 50
#: ``trusted_projects.json`` (the global home's trust store): trusting a project reloads its settings.
_FILES: Final = {"settings.json", "JIDO.md", "trusted_projects.json"}


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
