"""Hot reload (seed 000 ``Watcher``): watch the asset folders of every layer, debounced.

Only asset files matter: ``skills/``, ``commands/``, ``workflows/``,
``skill_graph/``, ``settings.json`` and ``JIDO.md`` of each JidoCode layer;
``skills/``, ``commands/``, ``agents/`` and ``CLAUDE.md`` of Claude Code's
``.claude/``; and the instructions files of the project root (``JIDO.md``,
``AGENTS.md``, ``CLAUDE.md``: the root is watched without recursion, so a large
tree costs nothing). The data dir's ``state/`` (written by other services) and
editor droppings are ignored, so a reload never triggers another one. A layer
folder appearing in (or leaving) the root is seen too, so the service can
watch the new set.

:func:`asset_changes` names what a burst changed (path, layer, kind) for the
``assets.changed`` signal the service publishes before the reload.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Final, Literal

from watchfiles import Change, DefaultFilter, awatch

from jidocode.services.asset_loader.layout import ASSET_DIRS, CLAUDE_ASSET_DIRS, ROOT_INSTRUCTIONS, Layer
from jidocode.shared.events.assets import AssetChange

__all__ = ["DEFAULT_DEBOUNCE_MS", "LAYER_FOLDER", "AssetFilter", "asset_changes", "classify", "watch_layers"]

log = logging.getLogger("jidocode.asset_loader.watcher")

#: How long a burst of changes must be quiet before one reload.
DEFAULT_DEBOUNCE_MS: Final = 50
#: The folders and the single files of a layer that are assets, by the layer's flavor.
#: ``trusted_projects.json`` (the global home's trust store): trusting a project reloads its settings.
_ENTRIES: Final[dict[str, tuple[frozenset[str], frozenset[str]]]] = {
    "jido": (frozenset(ASSET_DIRS), frozenset({"settings.json", "JIDO.md", "trusted_projects.json"})),
    "claude": (frozenset(CLAUDE_ASSET_DIRS), frozenset({"CLAUDE.md"})),
}
#: The ``kind`` of a changed file, by its first path part inside its layer (or the root).
_KINDS: Final = {
    "skills": "skill",
    "commands": "command",
    "workflows": "workflow",
    "skill_graph": "skill_graph",
    "agents": "agent",
    "settings.json": "settings",
    "JIDO.md": "instructions",
    "AGENTS.md": "instructions",
    "CLAUDE.md": "instructions",
    "trusted_projects.json": "trust",
}
#: The kind :func:`classify` gives a layer folder of the root that appeared or went away
#: (not an asset file: no ``assets.changed`` names it).
LAYER_FOLDER: Final = "layer"
_CHANGES: Final[dict[Change, Literal["added", "modified", "deleted"]]] = {
    Change.added: "added",
    Change.modified: "modified",
    Change.deleted: "deleted",
}


def _as_layer(item: Layer | Path) -> Layer:
    return item if isinstance(item, Layer) else Layer(name="project", path=item)


def _bases(layers: Sequence[Layer]) -> tuple[list[tuple[str, Layer]], list[tuple[str, Layer]]]:
    """The layer folders and the project roots as the watcher may report them (as given and
    resolved), each with its layer (for a root: one of its project layers)."""
    folders: list[tuple[str, Layer]] = []
    roots: dict[str, Layer] = {}
    for layer in layers:
        for base in {str(layer.path), str(layer.path.resolve())}:
            folders.append((base, layer))
        if layer.root is not None:
            for base in {str(layer.root), str(layer.root.resolve())}:
                roots.setdefault(base, layer)
    return folders, list(roots.items())


def _layer_names(layers: Sequence[Layer]) -> frozenset[str]:
    """The first path part of each project layer folder below its root (``.jido``, ``.claude``…)."""
    names: set[str] = set()
    for layer in layers:
        if layer.root is not None and layer.path.is_relative_to(layer.root):
            parts = layer.path.relative_to(layer.root).parts
            if parts:
                names.add(parts[0])
    return frozenset(names)


def classify(change: Change, path: str, layers: Sequence[Layer]) -> tuple[Layer, str] | None:
    """The layer and kind of a changed ``path``, or ``None`` when it is no asset file."""
    folders, roots = _bases(layers)
    return _classify(change, path, folders, roots, _layer_names(layers))


def _classify(
    change: Change,
    path: str,
    folders: list[tuple[str, Layer]],
    roots: list[tuple[str, Layer]],
    layer_names: frozenset[str],
) -> tuple[Layer, str] | None:
    for base, layer in folders:
        if path == base or not path.startswith(base + "/"):
            continue
        rel = path[len(base) + 1 :]
        head = rel.split("/", 1)[0]
        dirs, files = _ENTRIES[layer.flavor]
        if head in dirs or rel in files:
            return layer, _KINDS[head]
    for base, layer in roots:
        if not path.startswith(base + "/") or "/" in (rel := path[len(base) + 1 :]):
            continue
        if rel in ROOT_INSTRUCTIONS:
            return layer, _KINDS[rel]
        if rel in layer_names and change != Change.modified:
            return layer, LAYER_FOLDER
    return None


class AssetFilter(DefaultFilter):
    """Accept changes to asset files of the given layers (a bare folder: a JidoCode layer)
    and, for project layers, to the instructions files and layer folders of their root."""

    def __init__(self, layers: Sequence[Layer | Path]) -> None:
        super().__init__()
        found = [_as_layer(item) for item in layers]
        self._folders, self._roots = _bases(found)
        self._names = _layer_names(found)

    def __call__(self, change: Change, path: str) -> bool:
        if not super().__call__(change, path):
            return False
        return _classify(change, path, self._folders, self._roots, self._names) is not None


async def _watch(
    paths: list[Path],
    *,
    recursive: bool,
    watch_filter: AssetFilter,
    on_change: Callable[[set[tuple[Change, str]]], Awaitable[None]],
    stop: asyncio.Event,
    debounce_ms: int,
    armed: asyncio.Event,
) -> None:
    """One watchfiles watcher over ``paths``; ``armed`` is set once it watches."""
    watcher = awatch(
        *paths,
        watch_filter=watch_filter,
        debounce=debounce_ms,
        step=10,
        stop_event=stop,
        yield_on_timeout=True,
        rust_timeout=200,
        recursive=recursive,
    )
    async for changes in watcher:
        armed.set()
        if not changes:
            continue
        try:
            await on_change(changes)
        except Exception:  # a failed reload must not end the watcher
            log.exception("reload after a file change failed")


async def _set_when_all(events: list[asyncio.Event], ready: asyncio.Event) -> None:
    for event in events:
        await event.wait()
    ready.set()


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
    the project data dir before this starts); the project root of the project
    layers is watched without recursion (its instructions files and layer folders).
    """
    folders = [layer.path for layer in layers if layer.path.is_dir()]
    roots = sorted({layer.root for layer in layers if layer.root is not None and layer.root.is_dir()})
    groups = [(paths, recursive) for paths, recursive in ((folders, True), (roots, False)) if paths]
    ready = ready or asyncio.Event()
    if not groups:
        ready.set()
        await stop.wait()
        return
    watch_filter = AssetFilter(layers)
    armed = [asyncio.Event() for _ in groups]
    waiting = asyncio.create_task(_set_when_all(armed, ready))
    watchers = [
        asyncio.create_task(
            _watch(
                paths,
                recursive=recursive,
                watch_filter=watch_filter,
                on_change=on_change,
                stop=stop,
                debounce_ms=debounce_ms,
                armed=event,
            )
        )
        for (paths, recursive), event in zip(groups, armed, strict=True)
    ]
    try:
        await asyncio.gather(*watchers)
    finally:  # one failed or this was cancelled: the other watcher ends too
        for task in (*watchers, waiting):
            task.cancel()


def asset_changes(changes: set[tuple[Change, str]], layers: list[Layer]) -> list[AssetChange]:
    """The asset files of a burst, sorted by path (then change), each with its layer and kind.

    A file both added and modified in one burst is named once per change. A path is matched against each layer folder as given and resolved (the
    watcher may report either); one under no layer, or not an asset file (a layer folder of
    the root included), is left out.
    """
    folders, roots = _bases(layers)
    names = _layer_names(layers)
    found: dict[tuple[str, str], AssetChange] = {}
    for change, path in changes:
        hit = _classify(change, path, folders, roots, names)
        if hit is None or hit[1] == LAYER_FOLDER:
            continue
        layer, kind = hit
        what = _CHANGES[change]
        found[(path, what)] = AssetChange(change=what, path=path, layer=layer.name, kind=kind)
    return [found[key] for key in sorted(found)]
