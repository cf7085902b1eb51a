"""The LLM side of a conversation: the one litellm adapter and what builds its requests.

Owned by the LLM work (issue 6). ``make_llm_port`` is what the conversation
service calls to get its :class:`~jidocode.services.conversation.ports.LlmPort`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from jidocode.services.conversation.ports import LlmPort, LlmRequest, LlmResult
from jidocode.shared.config import Config
from jidocode.shared.errors import JidoError

__all__ = ["make_llm_port"]


class _Unconfigured:
    async def complete(self, request: LlmRequest, on_delta: Callable[[str], Awaitable[None]]) -> LlmResult:
        raise JidoError("no LLM adapter is installed yet", error_type="llm_not_configured")


def make_llm_port(config: Config) -> LlmPort:
    """Placeholder until the litellm adapter lands: every call is a clear error, never a fake answer."""
    return _Unconfigured()
