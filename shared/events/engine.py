"""Engine events: project lifecycle commands and signals (seed 000 ``Engine``)."""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import Field

from ._base import EventModel

__all__ = [
    "EVENTS",
    "ListProjects",
    "ProjectInfo",
    "ProjectStarted",
    "ProjectStopped",
    "StartProject",
    "StopProject",
    "WhereisProject",
]


class ProjectInfo(EventModel):
    """What the registry knows of one running project (a reply, not an event)."""

    channel: ClassVar[str] = "reply"
    type: Literal["project.info"] = "project.info"
    project_id: str
    root_path: str
    data_dir: str = ".jido"
    started_at: str
    host: str | None = None
    opts: dict[str, Any] = Field(default_factory=dict)


class StartProject(EventModel):
    channel: ClassVar[str] = "command"
    type: Literal["engine.start_project"] = "engine.start_project"
    root_path: str
    data_dir: str = ".jido"
    opts: dict[str, Any] = Field(default_factory=dict)


class StopProject(EventModel):
    channel: ClassVar[str] = "command"
    type: Literal["engine.stop_project"] = "engine.stop_project"
    project_id: str


class ListProjects(EventModel):
    channel: ClassVar[str] = "command"
    type: Literal["engine.list_projects"] = "engine.list_projects"


class WhereisProject(EventModel):
    channel: ClassVar[str] = "command"
    type: Literal["engine.whereis_project"] = "engine.whereis_project"
    project_id: str


class ProjectStarted(EventModel):
    type: Literal["project.started"] = "project.started"
    project_id: str
    root_path: str
    data_dir: str = ".jido"


class ProjectStopped(EventModel):
    type: Literal["project.stopped"] = "project.stopped"
    project_id: str
    root_path: str


EVENTS: tuple[type[EventModel], ...] = (
    ProjectInfo,
    StartProject,
    StopProject,
    ListProjects,
    WhereisProject,
    ProjectStarted,
    ProjectStopped,
)
