"""The tool catalog of a project (seed 000 ``ToolCatalog``), served by the project service.

Endpoints::

    jido.project.<p>.list_tools   ListTools -> ToolCatalog  built-ins + asset tools, policy-filtered
    jido.project.<p>.policy       GetPolicy -> ToolPolicy   the effective policy and tool limits

Asset-derived tools come from the asset loader (``jido.assets.<p>.tools``);
when it does not answer, the catalog holds the built-ins only. A tool the
policy denies outright (a bare deny rule, or no rule at all under
``default: deny``) is not shown to the model.
"""

from __future__ import annotations

import logging
from typing import Any

from jidocode.shared.bus import Bus
from jidocode.shared.clients import AssetsClient, ToolsClient
from jidocode.shared.endpoints import endpoint
from jidocode.shared.envelope import Envelope
from jidocode.shared.errors import JidoError
from jidocode.shared.events.tools import GetPolicy, ListTools, ToolCatalog, ToolPolicy, ToolSpec
from jidocode.shared.policy import filter_tools
from jidocode.shared.policy.loader import PolicyCache
from jidocode.shared.registry import ProjectDirectory
from jidocode.shared.service import ServiceHost
from jidocode.shared.tools import builtin_specs

__all__ = ["ASSET_TOOLS_TIMEOUT_S", "register"]

log = logging.getLogger("jidocode.project.tooling")

#: How long the catalog waits for the asset loader's tool list.
ASSET_TOOLS_TIMEOUT_S = 2.0
#: How long the catalog waits for the MCP servers' tools (the first listing starts them).
MCP_TOOLS_TIMEOUT_S = 25.0


async def asset_tools(bus: Bus, project_id: str) -> list[ToolSpec]:
    """The asset loader's tool specs of the project; empty when it does not answer."""
    try:
        catalog = await AssetsClient(bus, project_id, timeout=ASSET_TOOLS_TIMEOUT_S).tools()
    except JidoError as exc:
        log.debug("no asset tools for %s: %s", project_id, exc.message)
        return []
    builtin = {s["name"] for s in builtin_specs()}
    # an asset never shadows a built-in
    return [spec for spec in catalog.tools if spec.name not in builtin]


async def mcp_tools(bus: Bus, project_id: str, include_hidden: bool) -> list[ToolSpec]:
    """The tools of the project's MCP servers (the tool runner starts them, and filters by the MCP
    rules: default ask, hidden only by a deny rule); empty when it does not answer in time."""
    try:
        catalog = await ToolsClient(bus, project_id, timeout=MCP_TOOLS_TIMEOUT_S).mcp_tools(
            include_hidden=include_hidden
        )
    except JidoError as exc:
        log.debug("no MCP tools for %s: %s", project_id, exc.message)
        return []
    return [spec for spec in catalog.tools if spec.name.startswith("mcp__")]


def register(host: ServiceHost, bus: Bus, directory: ProjectDirectory) -> None:
    """Add ``list_tools`` and ``policy`` to the project service."""
    policies = PolicyCache(None)

    async def list_tools(project_id: str, request: ListTools, env: Envelope) -> ToolCatalog:
        info = await directory.get(project_id)
        policy, _ = policies.get(project_id, info.root_path, info.data_dir)
        specs: list[dict[str, Any]] = builtin_specs() + [
            s.model_dump() for s in await asset_tools(bus, project_id)
        ]
        shown = specs if request.include_hidden else filter_tools(policy, specs)
        tools = [ToolSpec.model_validate(s) for s in shown]
        return ToolCatalog(tools=tools + await mcp_tools(bus, project_id, request.include_hidden))

    async def policy(project_id: str, request: GetPolicy, env: Envelope) -> ToolPolicy:
        info = await directory.get(project_id)
        pol, tools = policies.get(project_id, info.root_path, info.data_dir)
        return ToolPolicy(project_id=project_id, **pol.summary(), limits=tools.model_dump())

    host.serve_project(endpoint("project", "list_tools"), list_tools)
    host.serve_project(endpoint("project", "policy"), policy)
