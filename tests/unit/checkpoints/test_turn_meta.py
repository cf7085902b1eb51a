"""The turn a conversation's tool call names (``ToolCallMeta.turn_id``/``turn_label``)."""

from __future__ import annotations

from typing import Any

from jidocode.services.conversation.core import RunToolIntent
from jidocode.services.conversation.outcomes import call_tool
from jidocode.shared.events.tools import TURN_ID_MAX, ToolCallMeta, ToolResult


class _Port:
    def __init__(self) -> None:
        self.metas: list[ToolCallMeta] = []

    async def run(self, project_id: str, name: str, args: dict[str, Any], meta: ToolCallMeta) -> ToolResult:
        self.metas.append(meta)
        return ToolResult(ok=True)

    async def cancel(self, project_id: str, request_id: str, conversation_id: str | None = None) -> None:
        return None


async def test_a_turn_without_a_user_message_is_named_by_its_correlation_and_a_long_one_by_none() -> None:
    port = _Port()
    for correlation in ("k1", "x" * (TURN_ID_MAX + 1)):
        intent = RunToolIntent(request_id="r", call_id="c", name="bash", args={}, correlation_id=correlation)
        await call_tool(port, "p", "conv", intent)
    assert [(m.turn_id, m.turn_label) for m in port.metas] == [("k1", None), (None, None)]
