"""Tool events: the call and result contract of the tool runner (seed 000 ``ToolRunner``).

The owner of the tool-runner domain extends this module; the call/result
shapes below are used by the conversation service, the CLI and the runner.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field

from ._base import EventModel

__all__ = [
    "EVENTS",
    "CancelTool",
    "GetPolicy",
    "ListTools",
    "RunTool",
    "ToolCallMeta",
    "ToolCancelRequested",
    "ToolCompleted",
    "ToolFailed",
    "ToolResult",
    "ToolResultError",
    "ToolSpec",
    "ToolStarted",
]


class ToolCallMeta(BaseModel):
    """Who asks for a tool call. Set by the caller service, never by the model."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    conversation_id: str | None = None
    #: Idempotency key: a redelivered request with the same key never runs twice.
    request_id: str
    correlation_id: str | None = None
    causation_id: str | None = None


class ToolResultError(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")

    type: str
    message: str
    details: dict[str, Any] = Field(default_factory=dict)


class ToolResult(BaseModel):
    """Seed 000 result format: ``ok`` with ``data``/``artifacts``/``logs``, or ``error``."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    ok: bool
    data: Any = None
    artifacts: list[Any] = Field(default_factory=list)
    logs: list[str] = Field(default_factory=list)
    error: ToolResultError | None = None


class RunTool(EventModel):
    """Request body of ``jido.tools.<p>.run``; the reply's result is a :class:`ToolResult`."""

    channel: ClassVar[str] = "command"
    type: Literal["tool.run"] = "tool.run"
    name: str
    args: dict[str, Any] = Field(default_factory=dict)
    meta: ToolCallMeta


class CancelTool(EventModel):
    """Request body of ``jido.tools.<p>.cancel``: stop a running call (by its request id)."""

    channel: ClassVar[str] = "command"
    type: Literal["tool.cancel"] = "tool.cancel"
    request_id: str


class ToolStarted(EventModel):
    type: Literal["tool.started"] = "tool.started"
    project_id: str
    name: str
    request_id: str
    conversation_id: str | None = None


class ToolCompleted(EventModel):
    type: Literal["tool.completed"] = "tool.completed"
    project_id: str
    name: str
    request_id: str
    conversation_id: str | None = None
    duration_ms: float = 0.0
    truncated: bool = False


class ToolFailed(EventModel):
    type: Literal["tool.failed"] = "tool.failed"
    project_id: str
    name: str
    request_id: str
    conversation_id: str | None = None
    error: ToolResultError
    duration_ms: float = 0.0


class ToolSpec(BaseModel):
    """A tool as exposed to an LLM: name, description, JSON-schema input."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    name: str
    description: str = ""
    input_schema: dict[str, Any] = Field(default_factory=dict)


class ListTools(EventModel):
    """Request body of ``jido.project.<p>.list_tools`` (and the asset loader's ``tools``):
    the reply's result is a list of :class:`ToolSpec` dicts."""

    channel: ClassVar[str] = "command"
    type: Literal["tool.list"] = "tool.list"
    #: Include tools the policy hides (the asset loader ignores this; the project filters).
    include_hidden: bool = False


class GetPolicy(EventModel):
    """Request body of ``jido.project.<p>.policy``: the reply is the effective policy summary."""

    channel: ClassVar[str] = "command"
    type: Literal["tool.get_policy"] = "tool.get_policy"


class ToolCancelRequested(EventModel):
    """Broadcast to every tool-runner replica: stop call ``request_id`` if you run it."""

    type: Literal["tool.cancel_requested"] = "tool.cancel_requested"
    project_id: str
    request_id: str


EVENTS: tuple[type[EventModel], ...] = (
    RunTool,
    CancelTool,
    ToolStarted,
    ToolCompleted,
    ToolFailed,
    ListTools,
    GetPolicy,
    ToolCancelRequested,
)
