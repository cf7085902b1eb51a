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
