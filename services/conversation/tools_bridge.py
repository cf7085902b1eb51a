"""The :class:`ToolPort` over NATS: the tool runner's ``run`` and ``cancel`` endpoints.

Errors never escape :meth:`NatsToolPort.run`: an unreachable or failing tool
runner becomes a failed :class:`ToolResult`, which the model sees as the
tool's answer.
"""

from __future__ import annotations

import logging
from typing import Any

from jidocode.shared.bus import Bus
from jidocode.shared.clients import ProjectClient, ToolsClient
from jidocode.shared.errors import JidoError
from jidocode.shared.events.tools import (
    ToolCallMeta,
    ToolResult,
    ToolResultError,
)

from .ports import ToolSpec

__all__ = ["NatsToolPort", "list_tool_specs"]

log = logging.getLogger("jidocode.conversation.tools")


class NatsToolPort:
    def __init__(self, bus: Bus, *, timeout: float = 600.0) -> None:
        self.bus = bus
        self.timeout = timeout

    async def run(self, project_id: str, name: str, args: dict[str, Any], meta: ToolCallMeta) -> ToolResult:
        try:
            return await ToolsClient(self.bus, project_id, timeout=self.timeout).run(
                name,
                args,
                meta=meta,
                conversation_id=meta.conversation_id,
                correlation_id=meta.correlation_id,
                causation_id=meta.causation_id,
            )
        except JidoError as exc:
            return ToolResult(
                ok=False, error=ToolResultError(type=exc.type, message=exc.message, details=exc.details)
            )
        except ValueError as exc:  # a reply that is not a ToolResult
            return ToolResult(ok=False, error=ToolResultError(type="invalid_reply", message=str(exc)))

    async def cancel(self, project_id: str, request_id: str, conversation_id: str | None = None) -> None:
        try:
            await ToolsClient(self.bus, project_id).cancel(request_id, conversation_id=conversation_id)
        except JidoError as exc:
            log.info("cancel of tool call %s: %s", request_id, exc.message)


async def list_tool_specs(bus: Bus, project_id: str, *, timeout: float = 3.0) -> list[ToolSpec]:
    """The policy-filtered tools of the project, from the project service's ``list_tools``.

    Raises ``JidoError`` (``service_unavailable`` when nobody answers).
    """
    catalog = await ProjectClient(bus, project_id, timeout=timeout).list_tools()
    return [ToolSpec.model_validate(spec.model_dump()) for spec in catalog.tools]
