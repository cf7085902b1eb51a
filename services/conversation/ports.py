"""Ports of the conversation shell: what it needs from the outside world.

The shell carries out ``run_llm`` through an :class:`LlmPort` and ``run_tool``
through a :class:`ToolPort`. Real adapters live in ``llm/`` (litellm) and
``tools_bridge`` (the tool runner over NATS); tests may pass doubles, the
shipped service never fakes answers.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Awaitable, Callable
from typing import Any, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field, SkipValidation

from jidocode.shared.events.tools import ToolCallMeta, ToolResult

__all__ = [
    "ContextWindows",
    "LlmPort",
    "LlmRequest",
    "LlmResult",
    "LlmTokenUsage",
    "LlmToolCall",
    "LlmToolSpec",
    "ToolPort",
    "window_of",
]


class LlmToolSpec(BaseModel):
    """A tool as the model sees it (seed 000 ``ToolSpec``)."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    name: str
    description: str = ""
    input_schema: dict[str, Any] = Field(default_factory=lambda: {"type": "object", "properties": {}})


class LlmToolCall(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")

    id: str
    name: str
    arguments: dict[str, Any] = Field(default_factory=dict)


class LlmTokenUsage(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")

    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
    total_tokens: int = 0
    cost_usd: float | None = None


class LlmRequest(BaseModel):
    """One model call: built by the shell from the ``llm_context`` projection."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    project_id: str
    conversation_id: str
    correlation_id: str
    #: The conversation's id of this call (its ``conversation.llm.requested`` entry): the
    #: ``request_id`` of the ``llm.*`` signals.
    request_id: str | None = None
    #: OpenAI-style chat messages (``role``, ``content``, ``tool_calls``, ``tool_call_id``).
    #: Not validated: the shell builds them from the ``llm_context`` projection, and checking
    #: thousands of messages would make each call cost more the longer the conversation.
    #: Shared with the projection: an adapter must not change them in place.
    messages: SkipValidation[list[dict[str, Any]]]
    tools: list[LlmToolSpec] = Field(default_factory=list)
    #: Model settings (``model``, ``api_base``, ``api_key_env``, ``temperature``, ``timeout`` …).
    settings: dict[str, Any] = Field(default_factory=dict)


class LlmResult(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")

    content: str = ""
    tool_calls: list[LlmToolCall] = Field(default_factory=list)
    usage: LlmTokenUsage = Field(default_factory=LlmTokenUsage)
    model: str = ""
    finish_reason: str | None = None


class LlmPort(Protocol):
    async def complete(self, request: LlmRequest, on_delta: Callable[[str], Awaitable[None]]) -> LlmResult:
        """Run one completion, streaming text to ``on_delta``.

        Raises a ``JidoError`` (e.g. type ``llm_error``, ``llm_not_configured``)
        that the shell turns into a ``conversation.llm.failed`` signal.
        """
        ...


@runtime_checkable
class ContextWindows(Protocol):
    """What an :class:`LlmPort` may also offer: a model's context window in tokens.

    The shell reports it in the ``usage`` projection; a port without it
    (test doubles) leaves the window unknown (0).
    """

    def context_window(self, model: str) -> int:
        """The input window of ``model``; may block (a model map lookup): call it off the loop."""
        ...


#: Windows learnt per port and model: a model's window does not change while a port lives, and
#: asking again costs a thread hop (about a millisecond on a busy machine) after every model call.
_WINDOWS: weakref.WeakKeyDictionary[ContextWindows, dict[str, int]] = weakref.WeakKeyDictionary()


async def window_of(llm: object, model: str) -> int:
    """``model``'s window as ``llm`` knows it (0: a port without :class:`ContextWindows`, or no model).

    The first ask per port and model runs off the loop; the answer is kept for the port's life.
    """
    if not model or not isinstance(llm, ContextWindows):
        return 0
    known = _WINDOWS.setdefault(llm, {})
    window = known.get(model)
    if window is None:
        window = int(await asyncio.to_thread(llm.context_window, model))
        if len(known) < 256:  # model names come from settings: a bounded few per port
            known[model] = window
    return window


class ToolPort(Protocol):
    async def run(self, project_id: str, name: str, args: dict[str, Any], meta: ToolCallMeta) -> ToolResult:
        """Run one tool call through the tool runner; errors come back inside the result."""
        ...

    async def cancel(self, project_id: str, request_id: str, conversation_id: str | None = None) -> None:
        """Ask the tool runner to stop a running call of ``conversation_id`` (its owner)."""
        ...
