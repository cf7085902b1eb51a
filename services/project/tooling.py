"""The tool catalog of a project (seed 000 ``ToolCatalog``), served by the project service.

Endpoints::

    jido.project.<p>.list_tools   ListTools -> [ToolSpec]  built-ins + asset tools, policy-filtered
    jido.project.<p>.policy       GetPolicy -> the effective policy summary and tool limits

Asset-derived tools come from the asset loader (``jido.assets.<p>.tools``);
when it does not answer, the catalog holds the built-ins only. A tool the
policy denies outright (a bare deny rule, or no rule at all under
``default: deny``) is not shown to the model.
"""

from __future__ import annotations

import logging
from typing import Any

from jidocode.shared import subjects
from jidocode.shared.bus import Bus
from jidocode.shared.envelope import Envelope
from jidocode.shared.errors import JidoError
from jidocode.shared.events.tools import ListTools, ToolSpec
from jidocode.shared.policy import filter_tools
from jidocode.shared.policy.loader import PolicyCache
from jidocode.shared.registry import ProjectDirectory
from jidocode.shared.service import ServiceHost, expect, scoped_project_id
from jidocode.shared.tools import builtin_specs

__all__ = ["ASSET_TOOLS_TIMEOUT_S", "register"]

log = logging.getLogger("jidocode.project.tooling")

#: How long the catalog waits for the asset loader's tool list.
ASSET_TOOLS_TIMEOUT_S = 2.0


async def asset_tools(bus: Bus, project_id: str) -> list[dict[str, Any]]:
    """The asset loader's tool specs of the project; empty when it does not answer."""
    try:
        specs = await bus.request(
            subjects.assets(project_id, "tools"), ListTools(), timeout=ASSET_TOOLS_TIMEOUT_S
        )
    except JidoError as exc:
        log.debug("no asset tools for %s: %s", project_id, exc.message)
        return []
    out: list[dict[str, Any]] = []
    builtin = {s["name"] for s in builtin_specs()}
    for raw in specs if isinstance(specs, list) else []:
        try:
            spec = ToolSpec.model_validate(raw)
        except ValueError:
            continue
        if spec.name not in builtin:  # an asset never shadows a built-in
            out.append(spec.model_dump())
    return out


def register(host: ServiceHost, bus: Bus, directory: ProjectDirectory) -> None:
    """Add ``list_tools`` and ``policy`` to the project service."""
    policies = PolicyCache(None)

    async def list_tools(env: Envelope) -> list[dict[str, Any]]:
        project_id = scoped_project_id(env)
        request = expect(env, ListTools)
        info = await directory.get(project_id)
        policy, _ = policies.get(project_id, info.root_path, info.data_dir)
        specs: list[dict[str, Any]] = builtin_specs() + await asset_tools(bus, project_id)
        if request.include_hidden:
            return specs
        shown: list[dict[str, Any]] = filter_tools(policy, specs)
        return shown

    async def policy(env: Envelope) -> dict[str, Any]:
        project_id = scoped_project_id(env)
        info = await directory.get(project_id)
        pol, tools = policies.get(project_id, info.root_path, info.data_dir)
        return {"project_id": project_id, **pol.summary(), "limits": tools.model_dump()}

    host.add_endpoint("list_tools", subject=subjects.project_pattern("list_tools"), handler=list_tools)
    host.add_endpoint("policy", subject=subjects.project_pattern("policy"), handler=policy)
