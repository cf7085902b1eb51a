"""Every request/reply endpoint of JidoCode: which service serves which command where.

One table, :data:`ENDPOINTS`, pairs a service and a verb with the command it
takes (whose ``reply`` names the answer) and the subject it is served on.
Services register their handlers from it (``ServiceHost.serve``), the typed
clients in ``shared/clients`` build their requests from it, and the AsyncAPI
document (``jidocode contract asyncapi``) is generated from it, so the code,
the clients and the published contract cannot drift apart.

Scopes: ``engine`` endpoints are global (``jido.engine.<verb>``); the others
are per project (``jido.<scope>.<project_id>.<verb>``, served for every
project by one ``jido.<scope>.*.<verb>`` subscription).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Literal

from jidocode.shared import subjects
from jidocode.shared.events import Command

__all__ = ["ENDPOINTS", "Endpoint", "Scope", "endpoint", "endpoints_of"]

Scope = Literal["engine", "project", "conversations", "tools", "assets", "prds"]

_SCOPED_SUBJECT = {
    "project": subjects.project,
    "conversations": subjects.conversations,
    "tools": subjects.tools,
    "assets": subjects.assets,
    "prds": subjects.prds,
}
_SCOPED_PATTERN = {
    "project": subjects.project_pattern,
    "conversations": subjects.conversations_pattern,
    "tools": subjects.tools_pattern,
    "assets": subjects.assets_pattern,
    "prds": subjects.prds_pattern,
}


@dataclass(frozen=True)
class Endpoint:
    """One nats.micro endpoint: ``service`` answers ``command`` on ``jido.<scope>[.<p>].<verb>``."""

    service: str
    scope: Scope
    verb: str
    #: The command taken, as ``<module of shared/events>:<class>``: imported when first used,
    #: so a client (or a CLI command) loads only the models of the endpoints it calls.
    command_ref: str
    summary: str

    def __post_init__(self) -> None:
        if self.service not in subjects.SERVICE_NAMES:
            raise ValueError(f"unknown service {self.service!r}")
        subjects.validate_token(self.verb, "verb")

    @cached_property
    def command(self) -> type[Command[Any]]:
        """The command this endpoint takes (its ``reply`` names the answer)."""
        module, name = self.command_ref.split(":", 1)
        cls = getattr(importlib.import_module(f"jidocode.shared.events.{module}"), name)
        if not (isinstance(cls, type) and issubclass(cls, Command)):
            raise TypeError(f"endpoint {self.service}.{self.verb}: {self.command_ref} is no command")
        return cls

    @property
    def scoped(self) -> bool:
        """True for per-project endpoints (their subject carries the project id)."""
        return self.scope != "engine"

    def subject(self, project_id: str | None = None) -> str:
        """The subject a request for ``project_id`` is sent to (``ValueError`` on a bad id)."""
        if self.scope == "engine":
            if project_id is not None:
                raise ValueError(f"{self.verb} is an engine endpoint: it takes no project id")
            return subjects.engine(self.verb)
        if project_id is None:
            raise ValueError(f"{self.scope}.{self.verb} needs a project id")
        return _SCOPED_SUBJECT[self.scope](project_id, self.verb)

    def pattern(self) -> str:
        """What the serving endpoint subscribes to (a wildcard for the project id)."""
        if self.scope == "engine":
            return subjects.engine(self.verb)
        return _SCOPED_PATTERN[self.scope](self.verb)

    @property
    def request_type(self) -> str:
        return str(self.command.model_fields["type"].default)

    @property
    def reply_type(self) -> str:
        return str(self.command.reply.model_fields["type"].default)


ENDPOINTS: tuple[Endpoint, ...] = (
    Endpoint(
        "engine", "engine", "start_project", "engine:StartProject", "Start (or find) the project on a root"
    ),
    Endpoint("engine", "engine", "stop_project", "engine:StopProject", "Stop a project"),
    Endpoint("engine", "engine", "list_projects", "engine:ListProjects", "List running projects"),
    Endpoint(
        "engine",
        "engine",
        "whereis_project",
        "engine:WhereisProject",
        "A project and the instances serving it",
    ),
    Endpoint("project", "project", "info", "engine:GetProject", "The project's registry record"),
    Endpoint("project", "project", "list_tools", "tools:ListTools", "The policy-filtered tool catalogue"),
    Endpoint("project", "project", "policy", "tools:GetPolicy", "The effective policy and tool limits"),
    Endpoint(
        "project",
        "project",
        "reload_assets",
        "assets:ReloadAssets",
        "Reload the project's assets (by its asset loader)",
    ),
    Endpoint(
        "conversation",
        "conversations",
        "start",
        "conversation:StartConversation",
        "Start or reopen a conversation",
    ),
    Endpoint("conversation", "conversations", "stop", "conversation:StopConversation", "Stop a conversation"),
    Endpoint(
        "conversation",
        "conversations",
        "list",
        "conversation:ListConversations",
        "List a project's conversations",
    ),
    Endpoint(
        "conversation",
        "conversations",
        "delete",
        "conversation:DeleteConversation",
        "Delete a conversation and its record",
    ),
    Endpoint(
        "conversation",
        "conversations",
        "prune",
        "conversation:PruneConversations",
        "Delete conversations idle for days",
    ),
    Endpoint(
        "conversation", "conversations", "send_event", "conversation:SendEvent", "Send an external event"
    ),
    Endpoint(
        "conversation", "conversations", "get_projection", "conversation:GetProjection", "Read a projection"
    ),
    Endpoint(
        "conversation",
        "conversations",
        "replay",
        "conversation:Subscribe",
        "Where to follow and replay output",
    ),
    Endpoint(
        "conversation",
        "conversations",
        "rewind",
        "conversation:RewindConversation",
        "Rewind the context to before a user message",
    ),
    Endpoint("tool_runner", "tools", "run", "tools:RunTool", "Run one tool call under the policy"),
    Endpoint("tool_runner", "tools", "cancel", "tools:CancelTool", "Cancel a tool call by request id"),
    Endpoint("tool_runner", "tools", "mcp_tools", "tools:ListTools", "Tools of the project's MCP servers"),
    Endpoint(
        "tool_runner",
        "tools",
        "mcp_servers",
        "mcp:ListMcpServers",
        "The project's MCP servers and their state",
    ),
    Endpoint(
        "tool_runner", "tools", "checkpoints_list", "tools:ListCheckpoints", "The project's checkpoints"
    ),
    Endpoint(
        "tool_runner",
        "tools",
        "checkpoints_diff",
        "tools:DiffCheckpoint",
        "What restoring a checkpoint would change",
    ),
    Endpoint(
        "tool_runner",
        "tools",
        "checkpoints_restore",
        "tools:RestoreCheckpoint",
        "Put the project's files back as a checkpoint holds them",
    ),
    Endpoint("asset_loader", "assets", "get", "assets:GetAsset", "One skill, command or workflow"),
    Endpoint("asset_loader", "assets", "list", "assets:ListAssets", "List assets"),
    Endpoint("asset_loader", "assets", "search", "assets:SearchAssets", "Fuzzy search over assets"),
    Endpoint("asset_loader", "assets", "reload", "assets:ReloadAssets", "Reload the project's assets"),
    Endpoint(
        "asset_loader", "assets", "diagnostics", "assets:GetDiagnostics", "Diagnostics of the loaded assets"
    ),
    Endpoint("asset_loader", "assets", "graph", "assets:GraphQuery", "Query the skill graph"),
    Endpoint("asset_loader", "assets", "tools", "tools:ListTools", "Tools derived from assets"),
    Endpoint(
        "asset_loader", "assets", "call_tool", "tools:RunTool", "Run an asset-derived tool (authorized)"
    ),
    Endpoint("prd", "prds", "create", "prd:CreatePrd", "Write a new PRD's files"),
    Endpoint("prd", "prds", "list", "prd:ListPrds", "The project's PRDs and their loops"),
    Endpoint("prd", "prds", "get", "prd:GetPrd", "One PRD and its loop"),
    Endpoint("prd", "prds", "run", "prd:RunPrd", "Start a PRD's loop"),
    Endpoint("prd", "prds", "pause", "prd:PausePrd", "Pause a PRD's loop"),
    Endpoint("prd", "prds", "resume", "prd:ResumePrd", "Resume a paused PRD loop"),
    Endpoint("prd", "prds", "stop", "prd:StopPrd", "Stop a PRD's loop"),
    Endpoint(
        "prd", "prds", "reset_story", "prd:ResetStory", "Put a story back to pending (explicit user action)"
    ),
    Endpoint(
        "prd", "prds", "finish", "prd:FinishPrd", "Merge a PRD's branch, remove its worktree, push (finish)"
    ),
)

_BY_KEY: dict[tuple[str, str], Endpoint] = {(e.service, e.verb): e for e in ENDPOINTS}
if len(_BY_KEY) != len(ENDPOINTS):
    raise TypeError("two endpoints share a service and verb")


def endpoint(service: str, verb: str) -> Endpoint:
    """The endpoint ``verb`` of ``service`` (``KeyError`` naming both when there is none)."""
    try:
        return _BY_KEY[(service, verb)]
    except KeyError:
        raise KeyError(f"service {service!r} has no endpoint {verb!r}") from None


def endpoints_of(service: str) -> tuple[Endpoint, ...]:
    """The endpoints ``service`` serves, in table order."""
    return tuple(e for e in ENDPOINTS if e.service == service)
