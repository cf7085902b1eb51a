"""The projects a replica runs calls for: their registry record and current policy.

The record comes from the registry bucket (``jido_projects``, through
:class:`~jidocode.shared.registry.ProjectDirectory`); the policy and tool
limits from the project's settings.json layers, cached until one of the files
changes (:class:`~jidocode.shared.policy.loader.PolicyCache`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from jidocode.shared.bus import Bus
from jidocode.shared.errors import JidoError
from jidocode.shared.events.engine import ProjectInfo
from jidocode.shared.policy import Policy
from jidocode.shared.policy.loader import PolicyCache
from jidocode.shared.registry import ProjectDirectory, WatchedDirectory
from jidocode.shared.settings import ToolSettings

from .executor import Limits

__all__ = ["Project", "Projects"]


@dataclass(frozen=True, slots=True)
class Project:
    """A running project as its calls need it."""

    info: ProjectInfo
    policy: Policy
    tools: ToolSettings

    @property
    def limits(self) -> Limits:
        """The limits of each call (timeout and output cap from the ``tools`` settings)."""
        return Limits(timeout_s=self.tools.timeout_s, output_cap=self.tools.output_cap_bytes)


class Projects:
    """Project records and policies (policies cached per replica)."""

    def __init__(self, directory: ProjectDirectory, policies: PolicyCache) -> None:
        self.directory = directory
        self.policies = policies

    @classmethod
    async def open(cls, bus: Bus, jido_home: Path | None) -> Projects:
        return cls(await WatchedDirectory.open(bus), PolicyCache(jido_home))

    async def info(self, project_id: str) -> ProjectInfo:
        """The project's registry record alone (``NotFound``; ``Conflict`` when stopped)."""
        return await self.directory.get(project_id)

    async def get(self, project_id: str) -> Project:
        """The project's record and current policy (``NotFound``; ``InvalidInput`` on bad permissions)."""
        info = await self.directory.get(project_id)
        policy, tools = self.policies.get(project_id, info.root_path, info.data_dir)
        return Project(info=info, policy=policy, tools=tools)

    async def close(self) -> None:
        if isinstance(self.directory, WatchedDirectory):
            await self.directory.close()

    async def tools_or_none(self, project_id: str) -> ToolSettings | None:
        """The project's tool settings; ``None`` when the project or its settings cannot be read."""
        try:
            return (await self.get(project_id)).tools
        except JidoError:
            return None
