"""One tool call as the pipeline sees it: the command, its project, the extensions of what it emits."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from jidocode.shared.envelope import Envelope
from jidocode.shared.events.tools import RunTool

__all__ = ["Call", "CallKey"]

#: ``(project_id, request_id)``: a call on this replica (cancellation, quota waits).
CallKey = tuple[str, str]


@dataclass(frozen=True, slots=True)
class Call:
    """A ``RunTool`` request of ``project_id`` (the subject's project, authoritative)."""

    project_id: str
    request: RunTool
    #: Envelope extensions of every event the call emits (signals, the approval request).
    ext: dict[str, Any]

    @classmethod
    def of(cls, project_id: str, request: RunTool, env: Envelope) -> Call:
        """The call ``env`` carries: its signals continue the caller's correlation and point at ``env``."""
        ext = {
            "project_id": project_id,
            "conversation_id": request.meta.conversation_id,
            "correlation_id": request.meta.correlation_id or env.correlation_id,
            "causation_id": env.id,
        }
        return cls(project_id, request, ext)

    @property
    def name(self) -> str:
        return self.request.name

    @property
    def args(self) -> dict[str, Any]:
        return self.request.args

    @property
    def request_id(self) -> str:
        return self.request.meta.request_id

    @property
    def conversation_id(self) -> str | None:
        return self.request.meta.conversation_id

    @property
    def key(self) -> CallKey:
        return (self.project_id, self.request_id)
