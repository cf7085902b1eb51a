"""The projects' tool lists as offered to the model, asked of the project service and kept a while.

Asking the project service before every model call cost a request per turn; the
list changes only when assets reload or a project stops (dropped at once, on the
signal: :data:`SPECS_STALE`) or settings.json changes (seen within
``tool_specs_ttl_s``).
"""

from __future__ import annotations

import asyncio
import logging
import time

from jidocode.shared.bus import Bus
from jidocode.shared.errors import RequestTimeout, ServiceUnavailable
from jidocode.shared.events.assets import AssetsReloaded, SkillRegistryUpdated
from jidocode.shared.events.engine import ProjectStopped

from .ports import LlmToolSpec
from .settings import RuntimeSettings
from .tools_bridge import list_tool_specs

__all__ = ["SPECS_STALE", "ToolSpecCache", "is_fresh"]

log = logging.getLogger("jidocode.conversation")

#: Signals after which a project's cached tool list is stale.
SPECS_STALE: frozenset[str] = frozenset(
    model.TYPE for model in (AssetsReloaded, ProjectStopped, SkillRegistryUpdated)
)
#: The first and the longest pause between attempts while the project service does not answer.
_FIRST_DELAY_S = 0.2
_MAX_DELAY_S = 2.0

#: A cached list: the monotonic time it was fetched, and the list.
Cached = tuple[float, list[LlmToolSpec]]


def is_fresh(cached: Cached | None, now: float, ttl: float) -> bool:
    """Whether ``cached`` (fetched at its first item) may still be used at ``now``."""
    return cached is not None and now - cached[0] < ttl


class ToolSpecCache:
    """Each project's policy-filtered tool list, reused for ``tool_specs_ttl_s``."""

    def __init__(self, bus: Bus, settings: RuntimeSettings) -> None:
        self.bus = bus
        self.settings = settings
        #: project id -> (monotonic time fetched, the policy-filtered tool list)
        self._specs: dict[str, Cached] = {}

    def drop(self, project_id: str) -> None:
        """Forget ``project_id``'s list: the next call asks again."""
        self._specs.pop(project_id, None)

    async def get(self, project_id: str) -> list[LlmToolSpec]:
        """The project's tool list, from the cache while fresh.

        While the project service or NATS restarts, the list it gave last is still the
        best guess (it changes only on reloads); without one, ask again for
        ``list_tools_patience_s``.
        """
        cached = self._specs.get(project_id)
        if is_fresh(cached, time.monotonic(), self.settings.tool_specs_ttl_s):
            assert cached is not None
            return cached[1]
        give_up = time.monotonic() + self.settings.list_tools_patience_s
        delay = _FIRST_DELAY_S
        while True:
            try:
                specs = await list_tool_specs(
                    self.bus, project_id, timeout=self.settings.list_tools_timeout_s
                )
            except (ServiceUnavailable, RequestTimeout) as exc:
                if cached is not None:
                    log.warning(
                        "tool list of %s unavailable (%s): using the last one", project_id, exc.message
                    )
                    return cached[1]
                if time.monotonic() + delay >= give_up:
                    raise
                await asyncio.sleep(delay)  # backoff between attempts, bounded by give_up
                delay = min(delay * 2, _MAX_DELAY_S)
                continue
            self._specs[project_id] = (time.monotonic(), specs)
            return specs
