"""Asset tools (commands, skills, workflows): known to the asset loader, run by it.

The runner authorizes an asset tool by name like a built-in, then forwards
the call to the asset loader of the project (``AssetsClient.call_tool``). A
workflow or a skill route runs its own steps back through this runner, each
under the per-call timeout, so the composite call gets room for
:data:`COMPOSITE_STEPS` of them (:func:`forward_timeout`, pure) — never past the
caller's deadline, which the forwarded call carries (``meta.deadline``) so the
asset loader stops its steps when the caller stops waiting.
"""

from __future__ import annotations

import time
from typing import Final

from jidocode.shared.bus import Bus
from jidocode.shared.clients import AssetsClient
from jidocode.shared.errors import JidoError, NotFound
from jidocode.shared.events.tools import ToolResult, ToolSpec

from .call import Call
from .executor import Limits

__all__ = ["COMPOSITE_ASSET_TOOLS", "COMPOSITE_STEPS", "AssetTools", "forward_timeout"]

#: Asset tools made of other tool calls, and how many per-call timeouts they may take.
COMPOSITE_ASSET_TOOLS: frozenset[str] = frozenset({"run_workflow", "invoke_skill"})
COMPOSITE_STEPS: Final = 10


def forward_timeout(name: str, limits: Limits) -> float:
    """How long a forwarded call of ``name`` may take."""
    return limits.timeout_s * (COMPOSITE_STEPS if name in COMPOSITE_ASSET_TOOLS else 1)


class AssetTools:
    """The asset loader's tools, reached through its typed client."""

    def __init__(self, bus: Bus) -> None:
        self.bus = bus

    async def spec(self, project_id: str, name: str) -> ToolSpec:
        """The spec of asset tool ``name``; :class:`NotFound` when the loader has none (or cannot say)."""
        try:
            catalog = await AssetsClient(self.bus, project_id).tools()
        except JidoError as exc:
            raise NotFound(
                f"unknown tool {name!r} (the asset loader could not list its tools: {exc.message})",
                details={"tool": name},
            ) from None
        for spec in catalog.tools:
            if spec.name == name:
                return spec
        raise NotFound(f"unknown tool {name!r}", details={"tool": name})

    async def run(self, call: Call, limits: Limits) -> ToolResult:
        """Run ``call`` on the asset loader (already authorized here)."""
        client = AssetsClient(self.bus, call.project_id)
        ext = {k: v for k, v in call.ext.items() if k != "project_id"}  # the client sets its own
        timeout = forward_timeout(call.name, limits)
        meta = call.request.meta
        if meta.deadline is not None:
            timeout = max(0.001, min(timeout, meta.deadline - time.time()))
        deadline = time.time() + timeout
        request = call.request.model_copy(update={"meta": meta.model_copy(update={"deadline": deadline})})
        return await client.call_tool(request, timeout=timeout, **ext)
