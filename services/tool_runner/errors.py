"""Why the tool runner refuses or stops a call, as typed errors.

Error tree (besides the shared ones: ``PermissionDenied``, ``NotFound``,
``InvalidInput``, ``PayloadTooLarge``, ``RequestTimeout``)::

    JidoError
    ├── CallCancelled   cancelled        a cancel arrived before or while the call ran
    └── QuotaExceeded   quota_exceeded   no free slot of a quota in time (retryable)

Neither crosses the bus as an error reply: the pipeline turns every refusal
into a ``ToolResult`` with ``ok: false`` (see :func:`.executor.error_result`).
"""

from __future__ import annotations

from typing import Final

from jidocode.shared.errors import JidoError
from jidocode.shared.events.tools import ToolResult, ToolResultError

__all__ = ["CANCELLED", "CallCancelled", "QuotaExceeded", "cancelled_result"]

#: The message of a call stopped by a cancel.
CANCELLED: Final = "the call was cancelled"


class CallCancelled(JidoError):
    error_type = "cancelled"

    def __init__(self, message: str = CANCELLED) -> None:
        super().__init__(message)


class QuotaExceeded(JidoError):
    error_type = "quota_exceeded"
    default_retryable = True

    def __init__(self, scope: str, limit: int, *, message: str | None = None) -> None:
        super().__init__(
            message or f"too many tool calls running for this {scope} (limit {limit}); retry later",
            details={"scope": scope, "limit": limit},
        )


def cancelled_result() -> ToolResult:
    """The result of a call cancelled before it ran (or while its handler was stopped)."""
    return ToolResult(ok=False, error=ToolResultError(type="cancelled", message=CANCELLED))
