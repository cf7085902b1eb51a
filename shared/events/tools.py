"""Tool events: the call and result contract of the tool runner (seed 000 ``ToolRunner``).

The owner of the tool-runner domain extends this module; the call/result
shapes below are used by the conversation service, the CLI and the runner.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field

from ._base import Command, EventModel

__all__ = [
    "EVENTS",
    "CancelTool",
    "GetPolicy",
    "ListTools",
    "RunTool",
    "ToolCallMeta",
    "ToolCancelAccepted",
    "ToolCancelRequested",
    "ToolCatalog",
    "ToolCompleted",
    "ToolFailed",
    "ToolPolicy",
    "ToolResult",
    "ToolResultError",
    "ToolSafety",
    "ToolSpec",
    "ToolStarted",
]


class ToolCallMeta(BaseModel):
    """Who asks for a tool call. Set by the caller service, never by the model."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    conversation_id: str | None = None
    #: Idempotency key: a redelivered request with the same key never runs twice; reused for
    #: another call (tool, arguments or conversation) it is a ``conflict``.
    request_id: str
    correlation_id: str | None = None
    causation_id: str | None = None
    #: Unix time (seconds) after which the caller no longer waits for the result: the runner
    #: does not start the call after it, bounds its waits and runs by it, and passes it on to
    #: the steps of a workflow or skill. ``ToolsClient.run`` sets it from its timeout.
    deadline: float | None = None

    #: What the asset loader appends to a call's request id for each step of a workflow
    #: (``<id>/wf/<run>/<step>``) or a skill's tool call (``<id>/skill/<name>/<route>``).
    STEP_MARKERS: ClassVar[tuple[str, ...]] = ("/wf/", "/skill/")

    @property
    def root_request_id(self) -> str:
        """The request id of the top-level call this one is a step of (its own id at the top)."""
        cuts = [i for i in (self.request_id.find(m) for m in self.STEP_MARKERS) if i > 0]
        return self.request_id[: min(cuts)] if cuts else self.request_id


class ToolResultError(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")

    type: str
    message: str
    details: dict[str, Any] = Field(default_factory=dict)


class ToolResult(EventModel):
    """Seed 000 result format: ``ok`` with ``data``/``artifacts``/``logs``, or ``error``.

    The reply of ``jido.tools.<p>.run`` and of the asset loader's ``call_tool``:
    a tool that ran and failed is a result with ``ok: false``, not an error reply.
    """

    channel: ClassVar[str] = "reply"
    type: Literal["tool.result"] = "tool.result"
    ok: bool
    data: Any = None
    artifacts: list[Any] = Field(default_factory=list)
    logs: list[str] = Field(default_factory=list)
    error: ToolResultError | None = None


class RunTool(Command[ToolResult]):
    """Request body of ``jido.tools.<p>.run``: run one tool call under the project's policy."""

    type: Literal["tool.run"] = "tool.run"
    name: str
    args: dict[str, Any] = Field(default_factory=dict)
    meta: ToolCallMeta


class ToolCancelAccepted(EventModel):
    """Reply of ``jido.tools.<p>.cancel``: the call will not start, or is being stopped."""

    channel: ClassVar[str] = "reply"
    type: Literal["tool.cancel_accepted"] = "tool.cancel_accepted"
    request_id: str
    cancel_requested: bool = True


class CancelTool(Command[ToolCancelAccepted]):
    """Request body of ``jido.tools.<p>.cancel``: stop a running call (by its request id).

    Only the call's owner cancels it: ``conversation_id`` must be the call's
    conversation (``None`` for a call made outside any conversation).
    """

    type: Literal["tool.cancel"] = "tool.cancel"
    request_id: str
    conversation_id: str | None = None


class ToolStarted(EventModel):
    type: Literal["tool.started"] = "tool.started"
    project_id: str
    name: str
    request_id: str
    conversation_id: str | None = None
    #: Whether the processes of this call run in an OS sandbox: ``None`` for a tool that starts none.
    sandboxed: bool | None = None
    #: Which sandbox: ``bubblewrap``, ``landlock``, ``off`` (the user's global settings turned it off),
    #: ``unavailable`` (none works here: the call is refused); empty for a tool that starts no process.
    sandbox: str = ""


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


class ToolSafety(BaseModel):
    """What a call of a tool may do (seed 000 ``ToolSpec.safety``), in the terms of MCP's tool
    annotations (``readOnlyHint``, ``destructiveHint``, ``idempotentHint``, ``openWorldHint``).

    Hints for a client and for whoever writes the project's rules, never a permission: the
    policy decides what runs. The defaults are the cautious ones, for a tool nobody described.
    """

    model_config = ConfigDict(frozen=True, extra="ignore")

    read_only: bool = Field(default=False, description="it changes nothing: no file, no process")
    destructive: bool = Field(
        default=True, description="it may overwrite or delete what exists (false whenever read_only)"
    )
    idempotent: bool = Field(
        default=False, description="a second call with the same arguments changes nothing more"
    )
    open_world: bool = Field(
        default=True, description="it may reach past the project's files: processes it starts, the network"
    )
    permission: str = Field(
        default="", description="the name permission rules give it (Read, Edit, Bash); empty: its own name"
    )


class ToolSpec(BaseModel):
    """A tool of the catalogue (seed 000 ``ToolSpec``): name, description, the JSON schema of its
    input and of its output, and what a call may do.

    A model is shown only the name, the description and the input schema (the conversation's
    LLM adapter sends ``name``/``description``/``parameters``); ``output_schema`` and
    ``safety`` are for clients.
    """

    model_config = ConfigDict(frozen=True, extra="ignore")

    name: str
    description: str = ""
    input_schema: dict[str, Any] = Field(default_factory=dict)
    output_schema: dict[str, Any] = Field(
        default_factory=dict,
        description="JSON schema of the data of a successful tool.result; {}: not described",
    )
    safety: ToolSafety = Field(default_factory=ToolSafety, description="what a call may do")


class ToolCatalog(EventModel):
    """Reply of ``list_tools`` (project) and ``tools`` (asset loader): tool specs."""

    channel: ClassVar[str] = "reply"
    type: Literal["tool.catalog"] = "tool.catalog"
    tools: list[ToolSpec] = Field(default_factory=list)


class ListTools(Command[ToolCatalog]):
    """Request body of ``jido.project.<p>.list_tools`` (and the asset loader's ``tools``)."""

    type: Literal["tool.list"] = "tool.list"
    #: Include tools the policy hides (the asset loader ignores this; the project filters).
    include_hidden: bool = False


class ToolPolicy(EventModel):
    """Reply of ``jido.project.<p>.policy``: the effective policy and the tool limits."""

    channel: ClassVar[str] = "reply"
    type: Literal["tool.policy"] = "tool.policy"
    project_id: str
    root: str
    additional_directories: list[str] = Field(default_factory=list)
    allow: list[str] = Field(default_factory=list)
    deny: list[str] = Field(default_factory=list)
    ask: list[str] = Field(default_factory=list)
    default: str = "deny"
    protected: list[str] = Field(default_factory=list)
    sensitive: str = ""
    #: timeout_s, output_cap and the concurrency quotas (the ``tools`` settings).
    limits: dict[str, Any] = Field(default_factory=dict)


class GetPolicy(Command[ToolPolicy]):
    """Request body of ``jido.project.<p>.policy``: the effective policy summary."""

    type: Literal["tool.get_policy"] = "tool.get_policy"


class ToolCancelRequested(EventModel):
    """Broadcast to every tool-runner replica: stop call ``request_id`` if you run it."""

    type: Literal["tool.cancel_requested"] = "tool.cancel_requested"
    project_id: str
    request_id: str
    #: The conversation the cancel came from: a call of another conversation is not stopped.
    conversation_id: str | None = None


EVENTS: tuple[type[EventModel], ...] = (
    ToolResult,
    ToolCancelAccepted,
    ToolCatalog,
    ToolPolicy,
    RunTool,
    CancelTool,
    ToolStarted,
    ToolCompleted,
    ToolFailed,
    ListTools,
    GetPolicy,
    ToolCancelRequested,
)
