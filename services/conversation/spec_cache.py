"""The projects' tool lists as offered to the model, asked of the project service and kept a while.

Asking the project service before every model call cost a request per turn; the
list changes only when assets reload or a project stops (dropped at once, on the
signal: :data:`SPECS_STALE`) or settings.json changes (seen within
``tool_specs_ttl_s``). One fetch per project at a time: when a list goes stale under many
conversations, they all wait for the one request (before, each asked the project service
itself, and 600 conversations at once made it time out).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable

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
#: How a list is asked for: ``(bus, project_id, timeout=…)`` (the project service's ``list_tools``).
ListTools = Callable[..., Awaitable[list[LlmToolSpec]]]
#: What one fetch brought: the list, and whether the project service gave it (else the last one).
Fetched = tuple[list[LlmToolSpec], bool]


def is_fresh(cached: Cached | None, now: float, ttl: float) -> bool:
    """Whether ``cached`` (fetched at its first item) may still be used at ``now``."""
    return cached is not None and now - cached[0] < ttl


class ToolSpecCache:
    """Each project's policy-filtered tool list, reused for ``tool_specs_ttl_s``."""

    def __init__(
        self, bus: Bus, settings: RuntimeSettings, *, list_tools: ListTools = list_tool_specs
    ) -> None:
        self.bus = bus
        self.settings = settings
        self._list_tools = list_tools
        #: project id -> (monotonic time fetched, the policy-filtered tool list)
        self._specs: dict[str, Cached] = {}
        #: project id -> the fetch under way, which every caller of that project awaits
        self._fetching: dict[str, asyncio.Task[Fetched]] = {}

    def drop(self, project_id: str) -> None:
        """Forget ``project_id``'s list: the next call asks again (a fetch under way may have
        started before the change: it is not waited for, nor kept)."""
        self._specs.pop(project_id, None)
        self._fetching.pop(project_id, None)

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
        fetch = self._fetching.get(project_id)
        if fetch is None:
            fetch = asyncio.create_task(self._fetch(project_id, cached), name=f"tool-specs-{project_id}")
            self._fetching[project_id] = fetch
            fetch.add_done_callback(lambda t: self._fetched(project_id, t))
        # a caller cancelled (its conversation stopped) does not cancel the others' fetch
        specs, _ = await asyncio.shield(fetch)
        return specs

    def _fetched(self, project_id: str, fetch: asyncio.Task[Fetched]) -> None:
        """Keep the list ``fetch`` got from the project service, unless it was dropped meanwhile."""
        if self._fetching.get(project_id) is not fetch:
            return
        del self._fetching[project_id]
        if not fetch.cancelled() and fetch.exception() is None and fetch.result()[1]:
            self._specs[project_id] = (time.monotonic(), fetch.result()[0])

    async def _fetch(self, project_id: str, cached: Cached | None) -> Fetched:
        """Ask the project service (see :meth:`get`)."""
        give_up = time.monotonic() + self.settings.list_tools_patience_s
        delay = _FIRST_DELAY_S
        while True:
            try:
                specs = await self._list_tools(
                    self.bus, project_id, timeout=self.settings.list_tools_timeout_s
                )
            except (ServiceUnavailable, RequestTimeout) as exc:
                if cached is not None:
                    log.warning(
                        "tool list of %s unavailable (%s): using the last one", project_id, exc.message
                    )
                    return cached[1], False
                if time.monotonic() + delay >= give_up:
                    raise
                await asyncio.sleep(delay)  # backoff between attempts, bounded by give_up
                delay = min(delay * 2, _MAX_DELAY_S)
                continue
            return specs, True
