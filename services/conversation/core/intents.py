"""Effect intents: what the reducer wants done. The shell maps each onto a directive."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SkipValidation

from jidocode.shared.events.conversation import CompactionReason

from .signal import Signal

__all__ = [
    "CancelLlm",
    "CancelPendingSubagents",
    "CancelPendingTools",
    "ContinueDrain",
    "Emit",
    "Intent",
    "RunCompaction",
    "RunLlm",
    "RunToolIntent",
]


class _Intent(BaseModel):
    model_config = ConfigDict(frozen=True)


class RunLlm(_Intent):
    kind: Literal["run_llm"] = "run_llm"
    request_id: str
    correlation_id: str
    #: OpenAI-style messages as of the request (the ``llm_context`` projection). Built by
    #: the core, so not validated again: that would cost more the longer the conversation.
    messages: SkipValidation[tuple[dict[str, Any], ...]]
    turn: int


class RunCompaction(_Intent):
    """Summarise the older part of the context (a ``conversation.compaction.requested`` entry).

    The shell asks the model (``llm.compact_model``, else the conversation's) for a summary of
    ``messages`` and answers with ``conversation.compaction.completed`` (or ``.failed``).
    """

    kind: Literal["run_compaction"] = "run_compaction"
    request_id: str
    correlation_id: str
    reason: CompactionReason
    from_index: int
    to_index: int
    first_id: str
    last_id: str
    #: The context messages summarised (an earlier summary first), and those kept.
    messages: SkipValidation[tuple[dict[str, Any], ...]]
    kept: SkipValidation[tuple[dict[str, Any], ...]]
    context_tokens: int = 0
    instructions: str | None = None


class RunToolIntent(_Intent):
    kind: Literal["run_tool"] = "run_tool"
    request_id: str
    call_id: str
    name: str
    args: dict[str, Any]
    correlation_id: str


class CancelPendingTools(_Intent):
    kind: Literal["cancel_pending_tools"] = "cancel_pending_tools"
    request_ids: tuple[str, ...]
    correlation_id: str


class CancelPendingSubagents(_Intent):
    kind: Literal["cancel_pending_subagents"] = "cancel_pending_subagents"
    subagent_ids: tuple[str, ...]
    correlation_id: str


class CancelLlm(_Intent):
    kind: Literal["cancel_llm"] = "cancel_llm"
    request_id: str


class Emit(_Intent):
    """Publish (and journal) one new timeline entry."""

    kind: Literal["emit"] = "emit"
    entry: Signal


class ContinueDrain(_Intent):
    """The drain stopped at its step bound with signals still queued."""

    kind: Literal["continue_drain"] = "continue_drain"
    queued: int


Intent = Annotated[
    RunLlm
    | RunToolIntent
    | RunCompaction
    | CancelPendingTools
    | CancelPendingSubagents
    | CancelLlm
    | Emit
    | ContinueDrain,
    Field(discriminator="kind"),
]
