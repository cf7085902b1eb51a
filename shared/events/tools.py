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
    "TURN_ID_MAX",
    "TURN_LABEL_MAX",
    "CancelTool",
    "CheckpointDiff",
    "CheckpointInfo",
    "CheckpointList",
    "CheckpointRestored",
    "DiffCheckpoint",
    "GetPolicy",
    "ListCheckpoints",
    "ListTools",
    "RestoreCheckpoint",
    "RunTool",
    "ToolCallMeta",
    "ToolCancelAccepted",
    "ToolCancelRequested",
    "ToolCatalog",
    "ToolCompleted",
    "ToolFailed",
    "ToolNetwork",
    "ToolPolicy",
    "ToolResult",
    "ToolResultError",
    "ToolSafety",
    "ToolSpec",
    "ToolStarted",
]


#: The longest ``ToolCallMeta.turn_label`` (the user's message, cut by the caller).
TURN_LABEL_MAX = 200
#: The longest ``ToolCallMeta.turn_id``.
TURN_ID_MAX = 256


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

    #: The conversation turn the call belongs to (the id of the user message that opened it) and
    #: that message's text, cut to :data:`TURN_LABEL_MAX` characters: the tool runner records one
    #: checkpoint of the project's files per ``(conversation_id, turn_id)`` before the turn's
    #: first call that can write (docs/checkpoints.md). ``None``: no turn, no checkpoint.
    turn_id: str | None = Field(default=None, min_length=1, max_length=TURN_ID_MAX)
    turn_label: str | None = Field(default=None, max_length=TURN_LABEL_MAX)

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
    #: What the egress proxy lets tool processes reach (``sandbox.allowed_domains``, docs/network.md).
    allowed_domains: list[str] = Field(default_factory=list)
    denied_domains: list[str] = Field(default_factory=list)
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


class ToolNetwork(EventModel):
    """One connection a tool call asked for through the egress proxy (docs/network.md): the decision
    when it is made, and once more with the bytes moved when an allowed one closes."""

    type: Literal["tool.network"] = "tool.network"
    project_id: str
    request_id: str
    conversation_id: str | None = None
    #: The host as the program named it, and the port.
    host: str
    port: int
    #: ``allowed``, ``denied`` (``reason`` says why), or ``closed`` (an allowed one ended).
    outcome: Literal["allowed", "denied", "closed"]
    reason: str = ""
    #: The address connected to (after the checks), when there was one.
    address: str | None = None
    #: ``connect`` (a CONNECT tunnel) or ``http`` (a plain request through the proxy).
    via: Literal["connect", "http"] = "connect"
    bytes_up: int = 0
    bytes_down: int = 0


class CheckpointInfo(BaseModel):
    """One checkpoint: the project's files before the first writing call of a conversation's turn."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    #: A short stable id (the start of the checkpoint's commit id in the project's shadow repository).
    id: str
    conversation_id: str
    turn_id: str
    #: The user's message that opened the turn (cut; untrusted text: escape it where shown).
    label: str = ""
    #: Unix time (seconds) it was recorded.
    created_at: float
    #: How many files it holds.
    files: int = 0
    #: Paths left out: ``.gitignore``'d ones (a directory ends with ``/``), those over the size cap,
    #: nested repositories and names git cannot list (capped; ``…`` ends a cut list).
    skipped: list[str] = Field(default_factory=list)


class CheckpointList(EventModel):
    """Reply of ``jido.tools.<p>.checkpoints_list``: the checkpoints, oldest first."""

    channel: ClassVar[str] = "reply"
    type: Literal["tool.checkpoint_list"] = "tool.checkpoint_list"
    checkpoints: list[CheckpointInfo] = Field(default_factory=list)


class ListCheckpoints(Command[CheckpointList]):
    """Request body of ``jido.tools.<p>.checkpoints_list``: the project's checkpoints (of one
    conversation when ``conversation_id`` is given)."""

    type: Literal["tool.list_checkpoints"] = "tool.list_checkpoints"
    conversation_id: str | None = None


class CheckpointDiff(EventModel):
    """Reply of ``checkpoints_diff``: what a restore of ``checkpoint`` would change in the work tree.

    ``added``: files restore would make again (gone since), ``modified``: files it would write back,
    ``deleted``: files made since that it would delete. ``changed_by_user``: the paths among them
    somebody else than the agent changed since the checkpoint (restore keeps them unless told).
    """

    channel: ClassVar[str] = "reply"
    type: Literal["tool.checkpoint_diff"] = "tool.checkpoint_diff"
    checkpoint: CheckpointInfo
    added: list[str] = Field(default_factory=list)
    modified: list[str] = Field(default_factory=list)
    deleted: list[str] = Field(default_factory=list)
    changed_by_user: list[str] = Field(default_factory=list)


class DiffCheckpoint(Command[CheckpointDiff]):
    """Request body of ``jido.tools.<p>.checkpoints_diff``: compare a checkpoint with the work tree."""

    type: Literal["tool.diff_checkpoint"] = "tool.diff_checkpoint"
    checkpoint: str = Field(min_length=4, max_length=64)


class CheckpointRestored(EventModel):
    """Reply of ``checkpoints_restore``: the paths written back or deleted, and those kept because
    somebody else than the agent changed them since the checkpoint."""

    channel: ClassVar[str] = "reply"
    type: Literal["tool.checkpoint_restored"] = "tool.checkpoint_restored"
    checkpoint: CheckpointInfo
    restored: list[str] = Field(default_factory=list)
    kept: list[str] = Field(default_factory=list)


class RestoreCheckpoint(Command[CheckpointRestored]):
    """Request body of ``jido.tools.<p>.checkpoints_restore``: put the work tree back as the
    checkpoint holds it (only ``paths`` when given; user-changed files only with
    ``overwrite_user_changes``)."""

    type: Literal["tool.restore_checkpoint"] = "tool.restore_checkpoint"
    checkpoint: str = Field(min_length=4, max_length=64)
    paths: list[str] | None = None
    overwrite_user_changes: bool = False


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
    CheckpointList,
    ListCheckpoints,
    CheckpointDiff,
    DiffCheckpoint,
    CheckpointRestored,
    RestoreCheckpoint,
    ToolNetwork,
)
