"""Asset events: the asset loader's requests and signals (seeds 000 ``AssetStore``, 001 ``SkillRegistry``).

Requests (``jido.assets.<p>.<verb>``, reply in brackets)::

    get          GetAsset          [AssetDocument: the asset as a dict, with "type"]
    list         ListAssets        [AssetItems: {type, name, description, layer, path, …}]
    search       SearchAssets      [AssetItems: … + score], fuzzy
    reload       ReloadAssets      [AssetReport: generation, counts, diagnostics]
    diagnostics  GetDiagnostics    [AssetReport + settings_files]
    graph        GraphQuery        [GraphResult: depends on op]
    tools        tools.ListTools   [tools.ToolCatalog]
    call_tool    tools.RunTool     [tools.ToolResult]

Signals (``jido.sig.<type>``): ``skill/registry/updated``,
``project.assets_reloaded``, ``workflow.run.*``, ``skill.route.*``, and seed 000
§6's ``project.assets_loaded`` (every load, a summary) and ``assets.changed``
(what the watcher saw change, before the reload it triggers). Skill hook signals are
published on ``jido.hook.<signal_type>`` with the type settings give them, so
they are not catalogue types.
"""

from __future__ import annotations

from typing import Any, ClassVar, Final, Literal

from pydantic import BaseModel, ConfigDict, Field

from ._base import Command, EventModel

__all__ = [
    "EVENTS",
    "MAX_CHANGES_PER_SIGNAL",
    "AssetChange",
    "AssetDocument",
    "AssetItems",
    "AssetReport",
    "AssetsChanged",
    "AssetsLoaded",
    "AssetsReloaded",
    "GetAsset",
    "GetDiagnostics",
    "GraphQuery",
    "GraphResult",
    "ListAssets",
    "ReloadAssets",
    "SearchAssets",
    "SkillRegistryUpdated",
    "SkillRouteCompleted",
    "SkillRouteFailed",
    "WorkflowRunCompleted",
    "WorkflowRunFailed",
    "WorkflowRunStarted",
    "WorkflowRunStep",
]

AssetType = Literal["skill", "command", "workflow"]


class AssetDocument(EventModel):
    """Reply of ``get``: one asset, as the loader parsed it (``asset["type"]`` is its kind)."""

    channel: ClassVar[str] = "reply"
    type: Literal["assets.document"] = "assets.document"
    asset: dict[str, Any]


class AssetItems(EventModel):
    """Reply of ``list`` and ``search``: one summary per asset (search adds ``score``)."""

    channel: ClassVar[str] = "reply"
    type: Literal["assets.items"] = "assets.items"
    items: list[dict[str, Any]] = Field(default_factory=list)


class AssetReport(EventModel):
    """Reply of ``reload`` and ``diagnostics``: the generation now served and its diagnostics."""

    channel: ClassVar[str] = "reply"
    type: Literal["assets.report"] = "assets.report"
    generation: int
    loaded_at: str = ""
    root: str | None = None
    counts: dict[str, int] = Field(default_factory=dict)
    diagnostics: list[dict[str, Any]] = Field(default_factory=list)
    #: The settings files read (``diagnostics`` only).
    settings_files: list[str] = Field(default_factory=list)


class GraphResult(EventModel):
    """Reply of ``graph``: ``result``'s shape depends on the query's ``op``."""

    channel: ClassVar[str] = "reply"
    type: Literal["assets.graph_result"] = "assets.graph_result"
    op: str
    result: Any = None


class GetAsset(Command[AssetDocument]):
    type: Literal["assets.get"] = "assets.get"
    kind: AssetType
    name: str = Field(min_length=1, max_length=128)


class ListAssets(Command[AssetItems]):
    type: Literal["assets.list"] = "assets.list"
    kind: AssetType | None = None


class SearchAssets(Command[AssetItems]):
    type: Literal["assets.search"] = "assets.search"
    query: str = Field(min_length=1, max_length=256)
    kind: AssetType | None = None
    limit: int = Field(default=20, ge=1, le=100)


class ReloadAssets(Command[AssetReport]):
    type: Literal["assets.reload"] = "assets.reload"


class GetDiagnostics(Command[AssetReport]):
    type: Literal["assets.diagnostics"] = "assets.diagnostics"


class GraphQuery(Command[GraphResult]):
    """A skill-graph query. ``op``: node, neighbours, links, backlinks, search, path, nodes."""

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


# --- skill routes dispatched by signals (seed 001 ``handle_signal``) ------------------------------
#
# A CloudEvent published on ``jido.assets.<p>.signal`` whose type is a skill route runs that
# route's action (through the tool runner's ``invoke_skill``); its outcome is one of these two
# signals.


class SkillRouteCompleted(EventModel):
    """A routed signal's action succeeded; ``data`` is its result (the ``invoke_skill`` tool's)."""

    type: Literal["skill.route.completed"] = "skill.route.completed"
    project_id: str
    #: The id of the CloudEvent that asked for the route (also the ``causationid``).
    signal_id: str
    route: str
    skill: str | None = None
    data: Any = None


class SkillRouteFailed(EventModel):
    """A routed signal could not run (no skill routes its type, policy …) or its action failed."""

    type: Literal["skill.route.failed"] = "skill.route.failed"
    project_id: str
    signal_id: str
    route: str
    skill: str | None = None
    error: dict[str, Any] = Field(default_factory=dict)
    data: Any = None


#: Changed files named by one ``assets.changed`` (its ``count`` says how many there were).
MAX_CHANGES_PER_SIGNAL: Final = 100


class AssetsLoaded(EventModel):
    """A project's assets were (re)loaded (seed 000 §6 ``project.assets_loaded``).

    Published on every load of a generation, the first one (``trigger`` ``"load"``)
    and every reload (``"watch"``, ``"request"``, …), just before
    ``project.assets_reloaded``, which carries the same generation with its
    diagnostics themselves. ``counts`` are the generation's
    (``skill``, ``command``, ``workflow``, ``graph_node``).
    """

    type: Literal["project.assets_loaded"] = "project.assets_loaded"
    project_id: str
    generation: int = Field(ge=0)
    counts: dict[str, int]
    diagnostics: int = Field(default=0, ge=0)
    trigger: str = "request"
    duration_ms: float = Field(default=0.0, ge=0.0)


class AssetChange(BaseModel):
    """One changed file of an ``assets.changed``."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    change: Literal["added", "modified", "deleted"]
    #: The file as the watcher saw it (absolute).
    path: str
    #: ``global`` (the JidoCode home) or ``project``.
    layer: str
    #: ``skill``, ``command``, ``workflow``, ``skill_graph`` (a file under that folder),
    #: ``settings`` (settings.json), ``instructions`` (JIDO.md) or ``trust`` (trusted_projects.json).
    kind: str


class AssetsChanged(EventModel):
    """The watcher saw asset files change (seed 000 ``Watcher``: "Emit ``assets.changed``").

    One per debounced burst, before the reload it triggers (whose
    ``project.assets_loaded`` has ``trigger`` ``"watch"``). At most
    :data:`MAX_CHANGES_PER_SIGNAL` files are named; ``count`` is all of them and
    ``kinds`` every kind that changed.
    """

    type: Literal["assets.changed"] = "assets.changed"
    project_id: str
    changes: list[AssetChange] = Field(default_factory=list, max_length=MAX_CHANGES_PER_SIGNAL)
    count: int = Field(default=0, ge=0)
    kinds: list[str] = Field(default_factory=list)


EVENTS: tuple[type[EventModel], ...] = (
    AssetDocument,
    AssetItems,
    AssetReport,
    GraphResult,
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
    SkillRouteCompleted,
    SkillRouteFailed,
    AssetsLoaded,
    AssetsChanged,
)
