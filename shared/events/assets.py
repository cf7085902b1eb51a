"""Asset events: the asset loader's requests and signals (seeds 000 ``AssetStore``, 001 ``SkillRegistry``).

Requests (``jido.assets.<p>.<verb>``, reply ``result`` in brackets)::

    get          GetAsset          [the asset as a dict, with "type"]
    list         ListAssets        [[{type, name, description, layer, path, …}]]
    search       SearchAssets      [[… + score]], fuzzy
    reload       ReloadAssets      [{generation, counts, diagnostics}]
    diagnostics  GetDiagnostics    [{generation, diagnostics}]
    graph        GraphQuery        [depends on op]
    tools        tools.ListTools   [[ToolSpec dicts]]
    call_tool    tools.RunTool     [tools.ToolResult]

Signals (``jido.sig.<type>``): ``skill/registry/updated``,
``project.assets_reloaded``, ``workflow.run.*``. Skill hook signals are
published on ``jido.hook.<signal_type>`` with the type settings give them, so
they are not catalogue types.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import Field

from ._base import EventModel

__all__ = [
    "EVENTS",
    "AssetsReloaded",
    "GetAsset",
    "GetDiagnostics",
    "GraphQuery",
    "ListAssets",
    "ReloadAssets",
    "SearchAssets",
    "SkillRegistryUpdated",
    "WorkflowRunCompleted",
    "WorkflowRunFailed",
    "WorkflowRunStarted",
    "WorkflowRunStep",
]

AssetType = Literal["skill", "command", "workflow"]


class GetAsset(EventModel):
    channel: ClassVar[str] = "command"
    type: Literal["assets.get"] = "assets.get"
    kind: AssetType
    name: str = Field(min_length=1, max_length=128)


class ListAssets(EventModel):
    channel: ClassVar[str] = "command"
    type: Literal["assets.list"] = "assets.list"
    kind: AssetType | None = None


class SearchAssets(EventModel):
    channel: ClassVar[str] = "command"
    type: Literal["assets.search"] = "assets.search"
    query: str = Field(min_length=1, max_length=256)
    kind: AssetType | None = None
    limit: int = Field(default=20, ge=1, le=100)


class ReloadAssets(EventModel):
    channel: ClassVar[str] = "command"
    type: Literal["assets.reload"] = "assets.reload"


class GetDiagnostics(EventModel):
    channel: ClassVar[str] = "command"
    type: Literal["assets.diagnostics"] = "assets.diagnostics"


class GraphQuery(EventModel):
    """A skill-graph query. ``op``: node, neighbours, links, backlinks, search, path, nodes."""

    channel: ClassVar[str] = "command"
    type: Literal["assets.graph"] = "assets.graph"
    op: Literal["node", "neighbours", "links", "backlinks", "search", "path", "nodes"]
    node: str | None = Field(default=None, max_length=512)
    target: str | None = Field(default=None, max_length=512)
    query: str | None = Field(default=None, max_length=256)
    directed: bool = True
    limit: int = Field(default=20, ge=1, le=100)


class SkillRegistryUpdated(EventModel):
    """Seed 001 ``publish_registry_update``: the skill names after a (re)load."""

    type: Literal["skill/registry/updated"] = "skill/registry/updated"
    project_id: str
    skills: list[str]
    count: int


class AssetsReloaded(EventModel):
    type: Literal["project.assets_reloaded"] = "project.assets_reloaded"
    project_id: str
    generation: int
    counts: dict[str, int]
    diagnostics: list[dict[str, Any]] = Field(default_factory=list)
    trigger: str = "request"


class WorkflowRunStarted(EventModel):
    type: Literal["workflow.run.started"] = "workflow.run.started"
    project_id: str
    run_id: str
    workflow: str
    inputs: dict[str, Any] = Field(default_factory=dict)


class WorkflowRunStep(EventModel):
    type: Literal["workflow.run.step"] = "workflow.run.step"
    project_id: str
    run_id: str
    workflow: str
    step: str
    index: int
    kind: str
    target: str
    ok: bool
    error: dict[str, Any] | None = None
    duration_ms: float = 0.0


class WorkflowRunCompleted(EventModel):
    type: Literal["workflow.run.completed"] = "workflow.run.completed"
    project_id: str
    run_id: str
    workflow: str
    outputs: dict[str, Any] = Field(default_factory=dict)
    duration_ms: float = 0.0


class WorkflowRunFailed(EventModel):
    type: Literal["workflow.run.failed"] = "workflow.run.failed"
    project_id: str
    run_id: str
    workflow: str
    step: str | None = None
    error: dict[str, Any] = Field(default_factory=dict)
    duration_ms: float = 0.0


EVENTS: tuple[type[EventModel], ...] = (
    GetAsset,
    ListAssets,
    SearchAssets,
    ReloadAssets,
    GetDiagnostics,
    GraphQuery,
    SkillRegistryUpdated,
    AssetsReloaded,
    WorkflowRunStarted,
    WorkflowRunStep,
    WorkflowRunCompleted,
    WorkflowRunFailed,
)
