"""A model's answer as the conversation journals it (``conversation.llm.completed``), read leniently.

The entry keeps what the model returned as plain data (``tool_calls``, ``usage``): a model or a
proxy may send odd shapes, and an old journal must still replay. These read it without failing:
:class:`ModelToolCall` one tool call, :func:`usage_count` and :func:`usage_cost` the ``usage`` map.
All are re-exported by :mod:`jidocode.shared.events.conversation`; none is a catalogue type.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict

__all__ = ["ModelToolCall", "usage_cost", "usage_count"]


class ModelToolCall(BaseModel):
    """One tool call of a model's answer, read from :attr:`LlmCompleted.tool_calls` leniently."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    id: object = None
    name: object = None
    arguments: Any = None


def usage_count(usage: Mapping[str, Any], key: str) -> int:
    """The count ``key`` of a ``usage`` map (0 when it is missing or empty)."""
    return int(usage.get(key) or 0)


def usage_cost(usage: Mapping[str, Any]) -> float | None:
    """The price of a call from its ``usage`` map (``None``: the call had none)."""
    cost = usage.get("cost_usd")
    return float(cost) if isinstance(cost, int | float) and not isinstance(cost, bool) else None
