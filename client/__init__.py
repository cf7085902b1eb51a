"""The JidoCode client SDK over NATS (seed 003): connect, configure_tools, send_message,
get_history, reset_session, get_context_usage, cancel, resume."""

from __future__ import annotations

from ._client import (
    ApprovalRequest,
    ApproveCallback,
    ContextUsage,
    Decision,
    JidoClient,
    TurnFailed,
    connect,
)
from ._turn import TurnOutcome, TurnTracker

__all__ = [
    "ApprovalRequest",
    "ApproveCallback",
    "ContextUsage",
    "Decision",
    "JidoClient",
    "TurnFailed",
    "TurnOutcome",
    "TurnTracker",
    "connect",
]
