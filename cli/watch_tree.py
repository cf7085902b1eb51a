"""What `jidocode watch --tree` and `--json` print: turns as trees, events as CloudEvents.

:class:`TurnTree` takes events as they arrive and returns the lines to print:
a header when a conversation shows up, one when a user message starts a turn,
then the turn's steps indented under it, request → model → tools → answer::

    ● conversation c1 (project 01J…)
      ▸ turn 01JD…: "read both files"
        ├ llm requested (loop turn 1)
        ├ llm completed: 2 tool calls · 30→4 tokens · tool_calls
        │  ├ tool read_file requested {"path": "README.md"}
        │  ├ tool read_file completed
        ├ llm completed: stop
        └ answer: "Both files read."

Events of several conversations interleave; each line names its turn by
indentation under the last header printed, and a header is printed again when
the conversation or turn changes. Deltas, ingest acknowledgements and requests
are left out (``--json`` has everything).

:func:`cloudevent_line` is one event as one line of the JSON event format: the
event's own attributes, plus the extension ``natssubject`` (where it was seen);
``subject`` is the event's own subject, or the NATS subject when it has none.
"""

from __future__ import annotations

import json
from typing import Any

from jidocode.shared.envelope import Envelope
from jidocode.shared.events.conversation import (
    AssistantMessage,
    Cancel,
    ConversationError,
    LlmCompleted,
    LlmFailed,
    LlmRequested,
    LoopStopped,
    ToolCallCompleted,
    ToolCallFailed,
    ToolCallRequested,
    UserMessage,
)

__all__ = ["MAX_TEXT", "TurnTree", "cloudevent_line"]

#: Characters of a text or arguments shown in a tree line.
MAX_TEXT = 80


def cloudevent_line(env: Envelope, nats_subject: str) -> str:
    """``env`` as one JSON CloudEvent (structured mode), with ``natssubject`` = where it arrived."""
    out = env.to_dict()
    out["natssubject"] = nats_subject
    out.setdefault("subject", nats_subject)
    return json.dumps(out, ensure_ascii=False)


def _short(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    text = " ".join(text.split())
    return text if len(text) <= MAX_TEXT else text[: MAX_TEXT - 1] + "…"


def _llm_completed(data: dict[str, Any]) -> str:
    parts: list[str] = []
    calls = data.get("tool_calls") or []
    if calls:
        parts.append(f"{len(calls)} tool call{'s' if len(calls) != 1 else ''}")
    usage = data.get("usage") or {}
    if usage.get("prompt_tokens") or usage.get("completion_tokens"):
        parts.append(f"{usage.get('prompt_tokens', 0)}→{usage.get('completion_tokens', 0)} tokens")
    if data.get("finish_reason"):
        parts.append(str(data["finish_reason"]))
    return "llm completed" + (": " + " · ".join(parts) if parts else "")


class TurnTree:
    """Turns of conversations as indented trees, line by line as events arrive."""

    def __init__(self) -> None:
        self._conversation: str | None = None
        self._turn: str | None = None

    def add(self, env: Envelope) -> list[str]:
        """The lines to print for ``env`` (none for an event the tree leaves out)."""
        step = self._step(env)
        conversation = env.conversation_id
        if step is None or conversation is None:
            return []
        depth, text = step
        lines: list[str] = []
        turn = env.correlation_id or env.id
        if conversation != self._conversation:
            self._conversation, self._turn = conversation, None
            lines.append(f"● conversation {conversation} (project {env.project_id or '?'})")
        if env.type == UserMessage.TYPE:
            self._turn = turn
            lines.append(f"  ▸ turn {turn}: {text}")
            return lines
        if turn != self._turn:
            self._turn = turn
            lines.append(f"  ▸ turn {turn}")
        lines.append(
            "    " + "│  " * (depth - 1) + ("└ " if env.type == AssistantMessage.TYPE else "├ ") + text
        )
        return lines

    def _step(self, env: Envelope) -> tuple[int, str] | None:
        data = env.data if isinstance(env.data, dict) else {}
        match env.type:
            case UserMessage.TYPE:
                return 0, json.dumps(_short(data.get("text", "")), ensure_ascii=False)
            case LlmRequested.TYPE:
                return 1, f"llm requested (loop turn {data.get('turn')})"
            case LlmCompleted.TYPE:
                return 1, _llm_completed(data)
            case LlmFailed.TYPE:
                return 1, f"llm failed: {data.get('error_type')}: {_short(data.get('message', ''))}"
            case ToolCallRequested.TYPE:
                return 2, f"tool {data.get('name')} requested {_short(data.get('args') or {})}"
            case ToolCallCompleted.TYPE:
                return 2, f"tool {data.get('name')} completed"
            case ToolCallFailed.TYPE:
                return (
                    2,
                    f"tool {data.get('name')} failed: {data.get('error_type')}: {_short(data.get('message', ''))}",
                )
            case AssistantMessage.TYPE:
                return 1, f"answer: {json.dumps(_short(data.get('text', '')), ensure_ascii=False)}"
            case LoopStopped.TYPE:
                return 1, f"loop stopped: {data.get('reason')}"
            case Cancel.TYPE:
                return 1, f"cancelled: {_short(data.get('reason', ''))}"
            case ConversationError.TYPE:
                return 1, f"error: {data.get('error_type')}: {_short(data.get('message', ''))}"
        return None
