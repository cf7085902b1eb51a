"""The results of an actor's directives as signals (pure, apart from the ports they call).

A result's id derives from its request's (``<request id>:result``), so a directive
re-run after a crash cannot apply twice.
"""

from __future__ import annotations

import logging
from typing import Final

from jidocode.shared.envelope import now_iso
from jidocode.shared.errors import JidoError
from jidocode.shared.events import EventModel
from jidocode.shared.events.conversation import ToolCallCompleted, ToolCallFailed
from jidocode.shared.events.tools import TURN_ID_MAX, ToolCallMeta

from .core import ConversationState, RunToolIntent, Signal
from .ports import ToolPort
from .tools_bridge import turn_of

__all__ = ["LLM_SOURCE", "TOOLS_SOURCE", "call_tool", "result_signal", "tool_failure"]

log = logging.getLogger("jidocode.conversation.actor")

#: Stable sources of result signals, so a rebuilt run equals an uninterrupted one.
LLM_SOURCE: Final = "conversation/llm"
TOOLS_SOURCE: Final = "conversation/tools"


def result_signal(event: EventModel, request_id: str, correlation_id: str, source: str) -> Signal:
    """The signal of a directive's result; its id derives from the request's."""
    return Signal.of(
        event,
        id=f"{request_id}:result",
        source=source,
        correlation_id=correlation_id,
        causation_id=request_id,
        time=now_iso(),
    )


def tool_failure(intent: RunToolIntent, exc: JidoError) -> ToolCallFailed:
    """The failed outcome of ``intent`` with ``exc``."""
    return ToolCallFailed(
        request_id=intent.request_id,
        call_id=intent.call_id,
        name=intent.name,
        error_type=exc.type,
        message=exc.message,
        details=exc.details,
    )


async def call_tool(
    tools: ToolPort,
    project_id: str,
    conversation_id: str,
    intent: RunToolIntent,
    state: ConversationState | None = None,
) -> ToolCallCompleted | ToolCallFailed:
    """Run ``intent`` through the tool port; its outcome, never an exception (a port that
    raises must still end the call: nothing waits forever). ``state``: the conversation's, whose
    open turn the call names (:func:`.tools_bridge.turn_of`), for the turn's checkpoint."""
    turn_id, label = turn_of(state)
    turn_id = turn_id or intent.correlation_id  # a turn no user message opened: its correlation
    meta = ToolCallMeta(
        conversation_id=conversation_id,
        request_id=intent.request_id,
        correlation_id=intent.correlation_id,
        causation_id=intent.request_id,
        turn_id=turn_id if 0 < len(turn_id) <= TURN_ID_MAX else None,
        turn_label=label,
    )
    try:
        result = await tools.run(project_id, intent.name, intent.args, meta)
    except JidoError as exc:
        return tool_failure(intent, exc)
    except Exception as raised:
        log.exception("tool port failed on %s (%s)", intent.request_id, intent.name)
        return tool_failure(
            intent, JidoError(f"the tool call failed: {raised}", error_type="internal", retryable=True)
        )
    if result.ok:
        return ToolCallCompleted(
            request_id=intent.request_id,
            call_id=intent.call_id,
            name=intent.name,
            data=result.data,
            artifacts=result.artifacts,
            logs=result.logs,
        )
    err = result.error
    return ToolCallFailed(
        request_id=intent.request_id,
        call_id=intent.call_id,
        name=intent.name,
        error_type=err.type if err else "tool_error",
        message=err.message if err else "the tool failed",
        details=err.details if err else {},
    )
