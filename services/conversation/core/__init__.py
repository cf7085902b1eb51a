"""The pure core of a conversation (seed 002): state, reducer, intents, projections. No I/O."""

from .intents import (
    CancelLlm,
    CancelPendingSubagents,
    CancelPendingTools,
    ContinueDrain,
    Emit,
    Intent,
    RunCompaction,
    RunLlm,
    RunToolIntent,
)
from .projections import PROJECTIONS, llm_context, project
from .reducer import CORE_SOURCE, drain, ingest, recover, replay, resume, run_to_idle
from .signal import Signal, normalize
from .state import (
    TRANSITIONS,
    ConversationState,
    Limits,
    PendingToolCall,
    Status,
    SubagentInfo,
    Trigger,
    initial_state,
    next_status,
)
from .timeline import Timeline

__all__ = [
    "CORE_SOURCE",
    "PROJECTIONS",
    "TRANSITIONS",
    "CancelLlm",
    "CancelPendingSubagents",
    "CancelPendingTools",
    "ContinueDrain",
    "ConversationState",
    "Emit",
    "Intent",
    "Limits",
    "PendingToolCall",
    "RunCompaction",
    "RunLlm",
    "RunToolIntent",
    "Signal",
    "Status",
    "SubagentInfo",
    "Timeline",
    "Trigger",
    "drain",
    "ingest",
    "initial_state",
    "llm_context",
    "next_status",
    "normalize",
    "project",
    "recover",
    "replay",
    "resume",
    "run_to_idle",
]
