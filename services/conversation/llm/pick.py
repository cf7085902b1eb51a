"""The conversation service's picked model: chosen at start, chosen again while there is none.

:func:`~jidocode.shared.llm_choice.choose_model` decides; this holds its
answer for the port. Provider keys are read from the service's environment
(they do not change while it runs); a local Ollama is probed only when no key
is set, off the event loop and with a short timeout, at start and again at a
call that finds nothing picked (Ollama may have been started after
``jidocode up``). A pick is only used by calls with no model and no
``api_base`` configured (:func:`~.options.resolve_options`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping

from jidocode.shared.llm_choice import ModelChoice, choose_model, ollama_url
from jidocode.shared.llm_probe import OllamaProbe, probe_ollama

__all__ = ["NOTHING_TO_PICK", "ModelPicker"]

log = logging.getLogger("jidocode.conversation.llm")

#: Why nothing was picked.
NOTHING_TO_PICK = "no provider key set and no local Ollama answering"


class ModelPicker:
    """The model picked from ``env`` (a mapping read at each pick: ``os.environ`` in the service)."""

    def __init__(self, env: Mapping[str, str], *, probe: OllamaProbe = probe_ollama) -> None:
        self._env = env
        self._probe = probe
        self.choice: ModelChoice | None = None
        self._lock = asyncio.Lock()

    async def pick(self) -> ModelChoice | None:
        """Choose again (the Ollama probe runs in a worker thread) and keep the answer."""
        async with self._lock:
            choice = choose_model(self._env)
            if choice is None:
                listed = await asyncio.to_thread(self._probe, ollama_url(self._env))
                choice = choose_model(self._env, listed)
            self.choice = choice
            return choice

    async def current(self) -> ModelChoice | None:
        """The pick, choosing again first when there is none yet."""
        return self.choice if self.choice is not None else await self.pick()

    def describe(self) -> str:
        """One line for the service's log."""
        if self.choice is None:
            return f"none ({NOTHING_TO_PICK})"
        return f"{self.choice.model} ({self.choice.reason})"

    def metadata(self) -> dict[str, str]:
        """The service's ``$SRV.INFO`` metadata about its pick (``jidocode models`` reads it)."""
        if self.choice is None:
            return {"llm_picked": "", "llm_picked_because": NOTHING_TO_PICK}
        return {"llm_picked": self.choice.model, "llm_picked_because": self.choice.reason}
