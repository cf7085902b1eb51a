"""The LLM side of a conversation: the one litellm adapter and what builds its requests.

``make_llm_port`` is what the conversation service calls to get its
:class:`~jidocode.services.conversation.ports.LlmPort`. Modules:

- :mod:`.adapter`  the only importer of litellm: streaming, tool-call assembly, usage, cost, errors, retries
- :mod:`.options`  model settings: settings.json ``llm``, environment, per-conversation overrides
- :mod:`.stream`   pure assembly of a streamed completion
- :mod:`.retry`    pure bounded backoff
- :mod:`.prompt`   the system prompt (JIDO.md, AGENTS.md/CLAUDE.md, root, policy, skill/command index)
- :mod:`.ledger`   the token ledger: usage totals per conversation and project, budgets
"""

from __future__ import annotations

from jidocode.services.conversation.ports import LlmPort
from jidocode.shared.config import Config

from .adapter import EventSink, LitellmPort

__all__ = ["LitellmPort", "make_llm_port"]


def make_llm_port(config: Config, *, sink: EventSink | None = None) -> LlmPort:
    """The litellm port. ``sink`` (e.g. :func:`.ledger.bus_sink`) receives every llm.* signal.

    ``config`` is the process configuration; model settings travel with each
    request (``LlmRequest.settings``), so one port serves every project.
    """
    return LitellmPort(sink=sink)
