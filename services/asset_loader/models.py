"""The compiled assets: frozen values, built by the pure loaders, served by the store."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from jidocode.shared.settings import HookSettings

__all__ = [
    "AssetKind",
    "CommandArgument",
    "CommandAsset",
    "GraphNode",
    "Skill",
    "SkillAction",
    "SkillHooks",
    "SkillRoute",
    "Workflow",
    "WorkflowInput",
    "WorkflowStep",
]

AssetKind = Literal["skill", "command", "workflow"]

_FROZEN = ConfigDict(frozen=True, extra="forbid")


class SkillAction(BaseModel):
    """One action of a skill. ``tool``/``args`` say how it runs through the tool runner;
    ``script`` (an action module's Python equivalent: ``scripts/<snake_name>.py`` of the
    skill) runs through the ``bash`` tool; with neither, the action name is the tool name."""

    model_config = _FROZEN

    name: str
    module: str | None = None
    tool: str | None = None
    args: dict[str, Any] = Field(default_factory=dict)
    description: str | None = None
    #: The script, relative to the skill's folder, that stands for the action module.
    script: str | None = None

    @property
    def tool_name(self) -> str:
        return self.tool or self.name


class SkillRoute(BaseModel):
    model_config = _FROZEN

    path: str
    action: str


class SkillHooks(BaseModel):
    """Frontmatter ``jido.hooks``: a hook given here replaces the settings hook of the same phase."""

    model_config = _FROZEN

    pre: HookSettings | None = None
    post: HookSettings | None = None


class Skill(BaseModel):
    model_config = _FROZEN

    name: str
    description: str
    version: str | None = None
    allowed_tools: list[str] = Field(default_factory=list)
    skill_module: str | None = None
    actions: list[SkillAction] = Field(default_factory=list)
    router: list[SkillRoute] = Field(default_factory=list)
    hooks: SkillHooks = Field(default_factory=SkillHooks)
    #: Frontmatter keys this loader does not interpret (license, metadata, …), kept as JSON.
    extra: dict[str, Any] = Field(default_factory=dict)
    body: str = ""
    path: str
    layer: str
    scripts: list[str] = Field(default_factory=list)

    def action_for(self, route: str) -> SkillAction | None:
        """The action ``route`` dispatches to, or ``None``."""
        for entry in self.router:
            if entry.path == route:
                for action in self.actions:
                    if action.name == entry.action:
                        return action
                return SkillAction(name=entry.action)
        return None


class CommandArgument(BaseModel):
    model_config = _FROZEN

    name: str
    description: str | None = None
    required: bool = False
    default: str | None = None


class CommandAsset(BaseModel):
    model_config = _FROZEN

    name: str
    description: str = ""
    arguments: list[CommandArgument] = Field(default_factory=list)
    argument_hint: str | None = None
    allowed_tools: list[str] = Field(default_factory=list)
    model: str | None = None
    template: str
    extra: dict[str, Any] = Field(default_factory=dict)
    path: str
    layer: str


class WorkflowInput(BaseModel):
    model_config = _FROZEN

    name: str
    description: str | None = None
    required: bool = False
    default: Any = None


StepKind = Literal["tool", "command", "skill", "workflow"]


class WorkflowStep(BaseModel):
    """One step. ``target`` is the tool, command, skill or workflow name; ``route`` for a skill."""

    model_config = _FROZEN

    id: str
    kind: StepKind
    target: str
    route: str | None = None
    args: Any = None
    #: Step ids whose outputs this step reads (``{{steps.<id>…}}``), in order of appearance.
    needs: list[str] = Field(default_factory=list)
    #: Every step this one runs after: the ``depends_on`` it declares, the steps it reads and,
    #: in a linear workflow, the step before it. The run's dependency graph.
    depends_on: list[str] = Field(default_factory=list)
    continue_on_error: bool = False


class Workflow(BaseModel):
    model_config = _FROZEN

    name: str
    description: str = ""
    inputs: list[WorkflowInput] = Field(default_factory=list)
    steps: list[WorkflowStep]
    outputs: dict[str, Any] = Field(default_factory=dict)
    #: Whether a step declares ``depends_on``/``needs``: the steps form a graph and independent
    #: ones run at the same time. Otherwise each step runs after the one before it.
    graph: bool = False
    #: Steps one run of this workflow may take, its sub-workflows run inline included.
    max_steps: int | None = None
    body: str = ""
    path: str
    layer: str

    @property
    def sub_workflows(self) -> list[str]:
        return [s.target for s in self.steps if s.kind == "workflow"]


class GraphNode(BaseModel):
    model_config = _FROZEN

    id: str
    title: str
    path: str
    layer: str
    tags: list[str] = Field(default_factory=list)
    links: list[str] = Field(default_factory=list)
    body: str = ""
