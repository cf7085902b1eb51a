"""Typed clients of every JidoCode service: one method per endpoint, each returning
the reply model its command declares (or raising the typed error of the reply).

These are the only place that builds requests: services, the SDK, the CLI and
the benchmarks call each other through them, never through hand-written
subjects. Each is built on a connected :class:`~jidocode.shared.bus.Bus`::

    engine = EngineClient(bus)
    info = await engine.start_project("/path/to/project")
    conversations = ConversationsClient(bus, info.project_id)
    conv = await conversations.start()
    await conversations.send_message(conv.conversation_id, "hello")
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ._assets import AssetsClient
    from ._conversations import ConversationsClient
    from ._engine import EngineClient
    from ._prd import PrdClient
    from ._project import ProjectClient
    from ._tools import ToolsClient

__all__ = [
    "AssetsClient",
    "ConversationsClient",
    "EngineClient",
    "PrdClient",
    "ProjectClient",
    "ToolsClient",
]

#: Each client's module: imported when the client is first named, so a program loads only the
#: event models of the services it calls (issue 25, point 4: a CLI command starts fast).
_MODULES = {
    "AssetsClient": "_assets",
    "ConversationsClient": "_conversations",
    "EngineClient": "_engine",
    "PrdClient": "_prd",
    "ProjectClient": "_project",
    "ToolsClient": "_tools",
}


def __getattr__(name: str) -> Any:
    module = _MODULES.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)
