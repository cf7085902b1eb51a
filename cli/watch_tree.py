"""What `jidocode watch --tree` and `--json` print: turns as trees, events as CloudEvents.

:class:`TurnTree` takes events as they arrive and returns the lines to print:
a header when a conversation shows up, one when a user message starts a turn,
then the turn's steps indented under it, request → model → tools → answer → end::

    ● conversation c1 (project 01J…)
      ▸ turn 01JD…: "read both files"
        ├ llm requested (loop turn 1)
        ├ llm completed: 2 tool calls · 30→4 tokens · tool_calls
        │  ├ tool read_file requested {"path": "README.md"}
        │  ├ tool read_file completed
        ├ llm completed: stop
        ├ answer: "Both files read."
        └ turn ended: completed · 2 model calls

The turn's end line is ``conversation.turn.ended`` (decision 0317), the one end
every follower waits for; a journal from before it shows its turns without one.

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
from collections.abc import Callable
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
    TurnEnded,
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


def _turn_ended(data: dict[str, Any]) -> str:
    """The end line of a turn: its outcome, why it did not complete, its model calls."""
    ended = TurnEnded.read(data)
    if ended is None:
        return f"turn ended: {_short(data.get('outcome', '?'))} (malformed)"
    parts: list[str] = [ended.outcome]
    if ended.error_type:
        parts[0] += f": {ended.error_type}" + (f": {_short(ended.message)}" if ended.message else "")
    if ended.turns:
        parts.append(f"{ended.turns} model call{'s' if ended.turns != 1 else ''}")
    if ended.overflow_retried:
        parts.append("context overflowed, compacted and retried")
    return "turn ended: " + " · ".join(parts)


def _failure(data: dict[str, Any]) -> str:
    return f"{data.get('error_type')}: {_short(data.get('message', ''))}"


def _quoted(text: Any) -> str:
    return json.dumps(_short(text), ensure_ascii=False)


#: The event types a tree shows: each one's depth under its turn and its line.
_STEPS: dict[str, tuple[int, Callable[[dict[str, Any]], str]]] = {
    UserMessage.TYPE: (0, lambda d: _quoted(d.get("text", ""))),
    LlmRequested.TYPE: (1, lambda d: f"llm requested (loop turn {d.get('turn')})"),
    LlmCompleted.TYPE: (1, _llm_completed),
    LlmFailed.TYPE: (1, lambda d: f"llm failed: {_failure(d)}"),
    ToolCallRequested.TYPE: (2, lambda d: f"tool {d.get('name')} requested {_short(d.get('args') or {})}"),
    ToolCallCompleted.TYPE: (2, lambda d: f"tool {d.get('name')} completed"),
    ToolCallFailed.TYPE: (2, lambda d: f"tool {d.get('name')} failed: {_failure(d)}"),
    AssistantMessage.TYPE: (1, lambda d: f"answer: {_quoted(d.get('text', ''))}"),
    LoopStopped.TYPE: (1, lambda d: f"loop stopped: {d.get('reason')}"),
    Cancel.TYPE: (1, lambda d: f"cancelled: {_short(d.get('reason', ''))}"),
    ConversationError.TYPE: (1, lambda d: f"error: {_failure(d)}"),
    TurnEnded.TYPE: (1, _turn_ended),
}


def _step_of(env: Envelope) -> tuple[int, str] | None:
    """``env``'s depth under its turn and its line; ``None`` for an event the tree leaves out."""
    shown = _STEPS.get(env.type)
    if shown is None:
        return None
    depth, line = shown
    return depth, line(env.data if isinstance(env.data, dict) else {})


class TurnTree:
    """Turns of conversations as indented trees, line by line as events arrive."""

    def __init__(self) -> None:
        self._conversation: str | None = None
        self._turn: str | None = None

    def add(self, env: Envelope) -> list[str]:
        """The lines to print for ``env`` (none for an event the tree leaves out)."""
        step = _step_of(env)
        conversation = env.conversation_id
        if step is None or conversation is None:
            return []
        depth, text = step
        lines: list[str] = []
        turn = self._turn_of(env)
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
        lines.append("    " + "│  " * (depth - 1) + ("└ " if env.type == TurnEnded.TYPE else "├ ") + text)
        return lines

    def _turn_of(self, env: Envelope) -> str:
        """The turn ``env`` belongs to: its correlation id, or the turn shown now when ``env`` ends it."""
        if env.type == TurnEnded.TYPE and isinstance(env.data, dict):
            answered = env.data.get("message_ids")
            if self._turn is not None and isinstance(answered, list) and self._turn in answered:
                return self._turn
        return str(env.correlation_id or env.id)
