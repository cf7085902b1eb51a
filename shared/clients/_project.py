"""The project service's client: a project's record, tool catalogue and policy; its assets' reload."""

from __future__ import annotations

from typing import TYPE_CHECKING

from jidocode.shared.events.engine import GetProject, ProjectInfo
from jidocode.shared.events.tools import GetPolicy, ListTools, ToolCatalog, ToolPolicy

from ._base import Ext, ProjectScoped

if TYPE_CHECKING:
    from jidocode.shared.events.assets import AssetReport

__all__ = ["ProjectClient"]


class ProjectClient(ProjectScoped):
    """``jido.project.<p>.<verb>`` of one project."""

    service = "project"

    async def info(self, *, timeout: float | None = None, **ext: Ext) -> ProjectInfo:
        return await self._scoped("info", GetProject(), timeout=timeout, **ext)

    async def list_tools(
        self, *, include_hidden: bool = False, timeout: float | None = None, **ext: Ext
    ) -> ToolCatalog:
        """The tools the policy shows the model (``include_hidden``: every tool)."""
        return await self._scoped(
            "list_tools", ListTools(include_hidden=include_hidden), timeout=timeout, **ext
        )

    async def policy(self, *, timeout: float | None = None, **ext: Ext) -> ToolPolicy:
        return await self._scoped("policy", GetPolicy(), timeout=timeout, **ext)

    async def reload_assets(self, *, timeout: float | None = None, **ext: Ext) -> AssetReport:
        """Seed 000 ``reload_assets(project_id)``: reload the project's assets now; the new generation.

        The project service forwards it to the project's ``AssetStore``, the asset loader
        (``jido.assets.<p>.reload``), as the seed's project server does. The report carries the
        loader's diagnostics, the settings files' included.
        """
        from jidocode.shared.events.assets import ReloadAssets  # the assets' models: only here

        return await self._scoped("reload_assets", ReloadAssets(), timeout=timeout, **ext)
