"""When a conversation's turn is over, from its output events (pure): what the jidocode provider waits on.

The same rules as the client SDK's turn tracking (``client/_turn.py``; a service may not import
the SDK, so the provider keeps its own): a turn starts with the echo of the user message the
provider sent (events before it belong to someone else) and ends with one outcome:

==============  =================================================================================
``answered``    a model call without tool calls completed and its assistant message is known
``failed``      :class:`LlmFailed`; a context overflow is kept aside (:attr:`Turn.overflow`): a
                compaction and one retry follow unless the conversation is idle
``stopped``     :class:`LoopStopped` (the turn limit)
``cancelled``   :class:`Cancel` was applied
==============  =================================================================================
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from jidocode.shared.events.conversation import (
    AssistantMessage,
    Cancel,
    CompactionRequested,
    LlmCompleted,
    LlmFailed,
    LoopStopped,
    UserMessage,
)

__all__ = ["Outcome", "Turn"]

_OVERFLOW = "llm_context_overflow"


@dataclass(frozen=True)
class Outcome:
    status: Literal["answered", "failed", "stopped", "cancelled"]
    text: str = ""
    error_type: str = ""
    message: str = ""
    retryable: bool = False


@dataclass
class Turn:
    #: Id of the user message that opened the turn.
    message_id: str
    started: bool = False
    outcome: Outcome | None = None
    #: A context overflow that a compaction and a retry may still turn around.
    overflow: Outcome | None = None
    _final: set[str] = field(default_factory=set)
    _texts: dict[str, str] = field(default_factory=dict)

    def feed(
        self, event_type: str, data: dict[str, Any], *, event_id: str, correlation_id: str | None = None
    ) -> Outcome | None:
        """Take one output event; the outcome once the turn is over (and from then on)."""
        if self.outcome is not None:
            return self.outcome
        if not self.started:
            self.started = event_type == UserMessage.TYPE and self.message_id in (event_id, correlation_id)
            return None
        request_id = str(data.get("request_id"))
        match event_type:
            case LlmCompleted.TYPE if not data.get("tool_calls"):
                self._final.add(request_id)
                if request_id in self._texts:
                    self.outcome = Outcome("answered", text=self._texts[request_id])
            case AssistantMessage.TYPE:
                self._texts[request_id] = str(data.get("text") or "")
                if request_id in self._final:
                    self.outcome = Outcome("answered", text=self._texts[request_id])
            case LlmFailed.TYPE if data.get("error_type") == _OVERFLOW:
                self.overflow = Outcome(
                    "failed", error_type=_OVERFLOW, message=str(data.get("message") or "")
                )
            case CompactionRequested.TYPE:
                self.overflow = None  # the conversation goes on: the summary, then the retry
            case LlmFailed.TYPE:
                self.outcome = Outcome(
                    "failed",
                    error_type=str(data.get("error_type") or "llm_error"),
                    message=str(data.get("message") or ""),
                    retryable=bool(data.get("retryable")),
                )
            case LoopStopped.TYPE:
                self.outcome = Outcome(
                    "stopped",
                    error_type=str(data.get("reason") or "stopped"),
                    message=f"the loop stopped ({data.get('reason')}) after {data.get('turns')} of "
                    f"{data.get('max_turns')} turns",
                )
            case Cancel.TYPE:
                self.outcome = Outcome("cancelled", message=str(data.get("reason") or "cancelled"))
        return self.outcome
