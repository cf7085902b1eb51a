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

from dataclasses import dataclass
from typing import Any, Literal

from jidocode.shared import subjects
from jidocode.shared.events import Command
from jidocode.shared.events.assets import (
    GetAsset,
    GetDiagnostics,
    GraphQuery,
    ListAssets,
    ReloadAssets,
    SearchAssets,
)
from jidocode.shared.events.conversation import (
    DeleteConversation,
    GetProjection,
    ListConversations,
    PruneConversations,
    SendEvent,
    StartConversation,
    StopConversation,
    Subscribe,
)
from jidocode.shared.events.engine import GetProject, ListProjects, StartProject, StopProject, WhereisProject
from jidocode.shared.events.mcp import ListMcpServers
from jidocode.shared.events.prd import (
    CreatePrd,
    GetPrd,
    ListPrds,
    PausePrd,
    ResetStory,
    ResumePrd,
    RunPrd,
    StopPrd,
)
from jidocode.shared.events.tools import CancelTool, GetPolicy, ListTools, RunTool

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
    command: type[Command[Any]]
    summary: str

    def __post_init__(self) -> None:
        if self.service not in subjects.SERVICE_NAMES:
            raise ValueError(f"unknown service {self.service!r}")
        subjects.validate_token(self.verb, "verb")

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
    Endpoint("engine", "engine", "start_project", StartProject, "Start (or find) the project on a root"),
    Endpoint("engine", "engine", "stop_project", StopProject, "Stop a project"),
    Endpoint("engine", "engine", "list_projects", ListProjects, "List running projects"),
    Endpoint("engine", "engine", "whereis_project", WhereisProject, "A project and the instances serving it"),
    Endpoint("project", "project", "info", GetProject, "The project's registry record"),
    Endpoint("project", "project", "list_tools", ListTools, "The policy-filtered tool catalogue"),
    Endpoint("project", "project", "policy", GetPolicy, "The effective policy and tool limits"),
    Endpoint(
        "project",
        "project",
        "reload_assets",
        ReloadAssets,
        "Reload the project's assets (by its asset loader)",
    ),
    Endpoint("conversation", "conversations", "start", StartConversation, "Start or reopen a conversation"),
    Endpoint("conversation", "conversations", "stop", StopConversation, "Stop a conversation"),
    Endpoint("conversation", "conversations", "list", ListConversations, "List a project's conversations"),
    Endpoint(
        "conversation", "conversations", "delete", DeleteConversation, "Delete a conversation and its record"
    ),
    Endpoint(
        "conversation", "conversations", "prune", PruneConversations, "Delete conversations idle for days"
    ),
    Endpoint("conversation", "conversations", "send_event", SendEvent, "Send an external event"),
    Endpoint("conversation", "conversations", "get_projection", GetProjection, "Read a projection"),
    Endpoint("conversation", "conversations", "replay", Subscribe, "Where to follow and replay output"),
    Endpoint("tool_runner", "tools", "run", RunTool, "Run one tool call under the policy"),
    Endpoint("tool_runner", "tools", "cancel", CancelTool, "Cancel a tool call by request id"),
    Endpoint("tool_runner", "tools", "mcp_tools", ListTools, "Tools of the project's MCP servers"),
    Endpoint(
        "tool_runner", "tools", "mcp_servers", ListMcpServers, "The project's MCP servers and their state"
    ),
    Endpoint("asset_loader", "assets", "get", GetAsset, "One skill, command or workflow"),
    Endpoint("asset_loader", "assets", "list", ListAssets, "List assets"),
    Endpoint("asset_loader", "assets", "search", SearchAssets, "Fuzzy search over assets"),
    Endpoint("asset_loader", "assets", "reload", ReloadAssets, "Reload the project's assets"),
    Endpoint("asset_loader", "assets", "diagnostics", GetDiagnostics, "Diagnostics of the loaded assets"),
    Endpoint("asset_loader", "assets", "graph", GraphQuery, "Query the skill graph"),
    Endpoint("asset_loader", "assets", "tools", ListTools, "Tools derived from assets"),
    Endpoint("asset_loader", "assets", "call_tool", RunTool, "Run an asset-derived tool (authorized)"),
    Endpoint("prd", "prds", "create", CreatePrd, "Write a new PRD's files"),
    Endpoint("prd", "prds", "list", ListPrds, "The project's PRDs and their loops"),
    Endpoint("prd", "prds", "get", GetPrd, "One PRD and its loop"),
    Endpoint("prd", "prds", "run", RunPrd, "Start a PRD's loop"),
    Endpoint("prd", "prds", "pause", PausePrd, "Pause a PRD's loop"),
    Endpoint("prd", "prds", "resume", ResumePrd, "Resume a paused PRD loop"),
    Endpoint("prd", "prds", "stop", StopPrd, "Stop a PRD's loop"),
    Endpoint("prd", "prds", "reset_story", ResetStory, "Put a story back to pending (explicit user action)"),
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
