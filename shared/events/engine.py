"""Engine events: project lifecycle commands and signals (seed 000 ``Engine``)."""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import Field

from ._base import Command, EventModel

__all__ = [
    "EVENTS",
    "GetProject",
    "ListProjects",
    "ProjectInfo",
    "ProjectList",
    "ProjectLocation",
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
    #: ``running``, or ``stopped`` (``stop_project``; starting the same root again runs it again,
    #: with the same id and its conversations).
    status: Literal["running", "stopped"] = "running"
    stopped_at: str | None = None


class ProjectList(EventModel):
    """Reply of ``list_projects``: every running project."""

    channel: ClassVar[str] = "reply"
    type: Literal["engine.project_list"] = "engine.project_list"
    projects: list[ProjectInfo] = Field(default_factory=list)


class ProjectLocation(EventModel):
    """Reply of ``whereis_project``: the record and the project-service instances serving it."""

    channel: ClassVar[str] = "reply"
    type: Literal["engine.project_location"] = "engine.project_location"
    project: ProjectInfo
    hosts: list[str] = Field(default_factory=list)


class StartProject(Command[ProjectInfo]):
    """Start (or find) the project on ``root_path``: the same root always gives the same id."""

    type: Literal["engine.start_project"] = "engine.start_project"
    root_path: str
    data_dir: str = ".jido"
    opts: dict[str, Any] = Field(default_factory=dict)


class StopProject(Command[ProjectInfo]):
    type: Literal["engine.stop_project"] = "engine.stop_project"
    project_id: str


class ListProjects(Command[ProjectList]):
    type: Literal["engine.list_projects"] = "engine.list_projects"


class WhereisProject(Command[ProjectLocation]):
    type: Literal["engine.whereis_project"] = "engine.whereis_project"
    project_id: str


class GetProject(Command[ProjectInfo]):
    """Request body of ``jido.project.<p>.info``: the project's registry record."""

    type: Literal["project.get"] = "project.get"


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
    ProjectList,
    ProjectLocation,
    GetProject,
    StartProject,
    StopProject,
    ListProjects,
    WhereisProject,
    ProjectStarted,
    ProjectStopped,
)
