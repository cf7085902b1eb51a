"""Following one turn of a conversation from its output events (pure).

A turn starts with the user's message and ends with exactly one outcome:

==============  ===========================================================
``answered``    the model answered without tool calls: the final text
``failed``      :class:`LlmFailed` (e.g. ``llm_auth``, ``llm_budget_exceeded``); an
                ``llm_context_overflow`` is kept aside (:attr:`TurnTracker.overflow`):
                a compaction and one retry follow unless the conversation is idle

``stopped``     :class:`LoopStopped` (the turn limit)
``cancelled``   :class:`Cancel` was applied
==============  ===========================================================

Events before the echo of the user's own message are ignored, so a client
that joins a busy conversation does not take an earlier answer for its own.
Fields are read leniently (a missing one takes a neutral value): the tracker
must come to an outcome even from events of a neighbouring version.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from jidocode.shared.events.conversation import (
    AssistantMessage,
    Cancel,
    CompactionRequested,
    LlmCompleted,
    LlmFailed,
    LoopStopped,
    UserMessage,
)

__all__ = ["TurnOutcome", "TurnTracker"]


class TurnOutcome(BaseModel):
    model_config = ConfigDict(frozen=True)

    status: Literal["answered", "failed", "stopped", "cancelled"]
    text: str = ""
    error_type: str | None = None
    message: str = ""
    retryable: bool = False


@dataclass
class TurnTracker:
    #: Id of the :class:`UserMessage` that opened the turn.
    message_id: str
    correlation_id: str | None = None
    started: bool = False
    final_requests: set[str] = field(default_factory=set)
    texts: dict[str, str] = field(default_factory=dict)
    outcome: TurnOutcome | None = None
    #: An ``llm_context_overflow`` that a compaction and one retry may still turn around: the
    #: outcome only if the conversation did not go on (``send_message`` asks its state).
    overflow: TurnOutcome | None = None

    def feed(
        self, event_type: str, data: dict[str, Any], *, event_id: str, correlation_id: str | None = None
    ) -> TurnOutcome | None:
        """Take one output event; return the outcome once the turn is over (and keep returning it)."""
        if self.outcome is not None:
            return self.outcome
        if not self.started:
            if event_type == UserMessage.TYPE and (
                event_id == self.message_id
                or (correlation_id is not None and correlation_id == self.correlation_id)
            ):
                self.started = True
            return None
        match event_type:
            case LlmCompleted.TYPE:
                if not data.get("tool_calls"):
                    request_id = str(data.get("request_id"))
                    self.final_requests.add(request_id)
                    if request_id in self.texts:
                        self.outcome = TurnOutcome(status="answered", text=self.texts[request_id])
            case AssistantMessage.TYPE:
                request_id = str(data.get("request_id"))
                self.texts[request_id] = str(data.get("text") or "")
                if request_id in self.final_requests:
                    self.outcome = TurnOutcome(status="answered", text=self.texts[request_id])
            case LlmFailed.TYPE if data.get("error_type") == "llm_context_overflow":
                self.overflow = TurnOutcome(
                    status="failed",
                    error_type="llm_context_overflow",
                    message=str(data.get("message") or ""),
                )
            case CompactionRequested.TYPE:
                self.overflow = None  # the conversation goes on: summary, then the retry
            case LlmFailed.TYPE:
                self.outcome = TurnOutcome(
                    status="failed",
                    error_type=str(data.get("error_type") or "llm_error"),
                    message=str(data.get("message") or ""),
                    retryable=bool(data.get("retryable")),
                )
            case LoopStopped.TYPE:
                self.outcome = TurnOutcome(
                    status="stopped",
                    error_type=str(data.get("reason") or "stopped"),
                    message=f"the loop stopped ({data.get('reason')}) after {data.get('turns')} of "
                    f"{data.get('max_turns')} turns",
                )
            case Cancel.TYPE:
                self.outcome = TurnOutcome(status="cancelled", message=str(data.get("reason") or "cancelled"))
        return self.outcome
