"""What the pipeline reports at its edges: ``tool.started``, then ``tool.completed`` or ``tool.failed``.

The builders are pure; the pipeline emits their events (``bus.emit``, on
``jido.sig.<type>``) with the call's envelope extensions.
"""

from __future__ import annotations

from jidocode.shared.events.tools import ToolCompleted, ToolFailed, ToolResult, ToolResultError, ToolStarted
from jidocode.shared.sandbox import Choice

from .call import Call

__all__ = ["MAX_SIGNAL_MESSAGE", "finished", "started"]

#: A failure's message is cut to this many characters in ``tool.failed``.
MAX_SIGNAL_MESSAGE = 1000
#: What a failed result without an error is reported as (a forwarded result may lack one).
_UNEXPLAINED = ToolResultError(type="internal", message="the tool failed without an error")


def started(call: Call, sandbox: Choice | None = None) -> ToolStarted:
    """The call holds its quota slots and is about to run (in ``sandbox``, for a tool that starts processes)."""
    return ToolStarted(
        project_id=call.project_id,
        name=call.name,
        request_id=call.request_id,
        conversation_id=call.conversation_id,
        sandboxed=None if sandbox is None else sandbox.sandboxed,
        sandbox="" if sandbox is None else sandbox.mode,
    )


def finished(call: Call, result: ToolResult, duration_ms: float) -> ToolCompleted | ToolFailed:
    """The call's outcome: completed (and whether its output was truncated) or failed (and why)."""
    if result.ok:
        return ToolCompleted(
            project_id=call.project_id,
            name=call.name,
            request_id=call.request_id,
            conversation_id=call.conversation_id,
            duration_ms=duration_ms,
            truncated=isinstance(result.data, dict) and bool(result.data.get("truncated")),
        )
    error = result.error or _UNEXPLAINED
    return ToolFailed(
        project_id=call.project_id,
        name=call.name,
        request_id=call.request_id,
        conversation_id=call.conversation_id,
        error=ToolResultError(type=error.type, message=error.message[:MAX_SIGNAL_MESSAGE]),
        duration_ms=duration_ms,
    )
