"""The LLM side of a conversation: the one litellm adapter and what builds its requests.

``make_llm_port`` is what the conversation service calls to get its
:class:`~jidocode.services.conversation.ports.LlmPort`. Modules:

- :mod:`.adapter`  the only importer of litellm: streaming, tool-call assembly, usage, cost, errors, retries
- :mod:`.request`  pure: the arguments of one litellm call, the usage a chunk reports
- :mod:`.errors`   what litellm raised as a typed ``JidoError`` (litellm passed in)
- :mod:`.options`  model settings: settings.json ``llm``, environment, per-conversation overrides
- :mod:`.pick`     the model picked from the provider keys when none is configured
- :mod:`.stream`   pure assembly of a streamed completion
- :mod:`.deltas`   pure coalescing of streamed text into few ``llm.delta`` signals
- :mod:`.live`     the streamed text handed to the conversation in batches (a timer sends what waits)
- :mod:`.retry`    pure bounded backoff
- :mod:`.prompt`   the system prompt (JIDO.md, AGENTS.md/CLAUDE.md, root, policy, skill/command index)
- :mod:`.ledger`   the token ledger: usage totals per conversation and project, budgets
"""

from __future__ import annotations

from jidocode.services.conversation.ports import LlmPort
from jidocode.shared.bus import Bus
from jidocode.shared.config import Config
from jidocode.shared.settings import global_home

from .adapter import LitellmPort, preload_litellm
from .ledger import EventSink, KvLedger, UsageStore, bus_sink
from .pick import ModelPicker
from .prompt import SystemPrompts

__all__ = ["LitellmPort", "ModelPicker", "make_llm_port"]


def make_llm_port(
    config: Config,
    *,
    bus: Bus | None = None,
    sink: EventSink | None = None,
    store: UsageStore | None = None,
    picker: ModelPicker | None = None,
) -> LlmPort:
    """The litellm port.

    With ``bus``: each call gets the project's system prompt (:mod:`.prompt`)
    unless its messages already have one; llm.* signals (``llm.started``, ``llm.delta``,
    ``llm.completed``, ``llm.retrying``, ``llm.failed``,
    ``llm.budget.exceeded``) are published on ``jido.sig.<type>`` and usage is kept in the KV ledger (per conversation
    and project, and checked against ``llm.budget_*``). ``sink``/``store``
    replace either. Without any: no signals, an in-memory ledger.

    ``config`` is the process configuration; model settings travel with each
    request (``LlmRequest.settings``), so one port serves every project. ``picker``
    gives the model of a request that configures none (:mod:`.pick`); without it such
    a request is ``llm_not_configured``.
    """
    preload_litellm()
    prompts: SystemPrompts | None = None
    if bus is not None:
        sink = sink if sink is not None else bus_sink(bus)
        store = store if store is not None else KvLedger(bus)
        prompts = SystemPrompts(bus, jido_home=config.jido_home)
    settings_file = str(global_home(config.jido_home) / "settings.json")
    return LitellmPort(
        sink=sink, store=store, system_prompts=prompts, picker=picker, settings_file=settings_file
    )
