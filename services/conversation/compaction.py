"""The compaction effect: the summary call behind a ``conversation.compaction.requested`` entry.

The reducer decides when to compact and what (``core/reducer.py``: the ``llm.compact_at``
threshold, an ``llm_context_overflow``, a ``conversation.compact`` input) and the
``llm_context`` projection applies the result (``core/context.py``). Here the shell asks the
model for the summary and turns the answer into the result signal: a
``conversation.compaction.completed`` entry holding the summary and the token counts, or
``.failed``. The pure helpers (the summary prompt, the token estimate) are unit-tested.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Mapping, Sequence
from typing import Any, Final

from jidocode.shared.errors import JidoError
from jidocode.shared.events.conversation import CompactionCompleted, CompactionFailed

from .core import Limits, RunCompaction
from .core.context import summary_message
from .ports import LlmPort, LlmRequest

__all__ = [
    "COMPACT_SYSTEM_PROMPT",
    "MAX_TRANSCRIPT_CHARS",
    "compact",
    "compaction_limits",
    "estimate_tokens",
    "summary_prompt",
    "token_counts",
    "transcript",
]

COMPACT_SYSTEM_PROMPT: Final = (
    "You compact the history of a conversation between a user and a coding assistant so the "
    "assistant can carry on from your summary alone. Keep: what the user asked for and still "
    "wants, decisions and their reasons, facts learned (file paths, names, commands, errors, "
    "results), the work done and what remains to do. Leave out chit-chat and anything superseded. "
    "Write plain prose and short lists; never invent anything."
)
#: A tool result longer than this is cut in the transcript sent for the summary.
MAX_TOOL_CHARS: Final = 4_000
#: The transcript sent for the summary keeps at most this many characters (its end: the newest).
MAX_TRANSCRIPT_CHARS: Final = 400_000


def _text(content: Any) -> str:
    if isinstance(content, list):
        return " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return "" if content is None else str(content)


def transcript(messages: Sequence[Mapping[str, Any]]) -> str:
    """The messages as plain text (the summary call gets no tools, so no tool messages either)."""
    lines: list[str] = []
    for message in messages:
        role = str(message.get("role") or "?")
        text = _text(message.get("content"))
        if role == "tool":
            if len(text) > MAX_TOOL_CHARS:
                text = f"{text[:MAX_TOOL_CHARS]} […{len(text) - MAX_TOOL_CHARS} characters cut]"
            lines.append(f"tool result ({message.get('name')}): {text}")
            continue
        if text:
            lines.append(f"{role}: {text}")
        for call in message.get("tool_calls") or ():
            function = call.get("function") or {}
            lines.append(f"{role} calls {function.get('name')}({function.get('arguments')})")
    out = "\n".join(lines)
    if len(out) > MAX_TRANSCRIPT_CHARS:
        out = "[…the oldest part is cut]\n" + out[-MAX_TRANSCRIPT_CHARS:]
    return out


def summary_prompt(
    messages: Sequence[Mapping[str, Any]], instructions: str | None = None
) -> list[dict[str, Any]]:
    """The messages of the summary call for the context ``messages`` (an earlier summary first)."""
    ask = "Summarise this conversation so far:\n\n" + transcript(messages)
    if instructions:
        ask += f"\n\nThe user asks the summary to keep in particular: {instructions}"
    return [{"role": "system", "content": COMPACT_SYSTEM_PROMPT}, {"role": "user", "content": ask}]


def estimate_tokens(messages: Sequence[Mapping[str, Any]]) -> int:
    """About four characters a token, over the messages as JSON (deterministic, no tokenizer)."""
    size = len(json.dumps(list(messages), ensure_ascii=False, sort_keys=True, default=str))
    return math.ceil(size / 4)


def token_counts(
    context_tokens: int,
    summarised: Sequence[Mapping[str, Any]],
    kept: Sequence[Mapping[str, Any]],
    summary: str,
) -> tuple[int, int]:
    """``(tokens_before, tokens_after)`` of a compaction.

    Before: the last model call's count (``context_tokens``) when known, else the estimate.
    After: the same count scaled by the estimated share the new context (summary + kept) has of
    the old one (summarised + kept), so both are in the model's own units.
    """
    old = estimate_tokens([*summarised, *kept])
    new = estimate_tokens([summary_message(summary), *kept])
    before = context_tokens if context_tokens > 0 else old
    after = math.ceil(before * new / old) if old else new
    return before, after


def compaction_limits(limits: Limits, settings: Mapping[str, Any]) -> Limits:
    """``limits`` with the conversation's ``compact_at`` and ``compact_keep_turns`` settings.

    A bad value raises ``JidoError`` (``llm_invalid_settings``) naming it: the settings file
    is validated when loaded, so only a start request's override can get here with one.
    """
    update = {k: settings[k] for k in ("compact_at", "compact_keep_turns") if settings.get(k) is not None}
    if not update:
        return limits
    try:
        return Limits.model_validate({**limits.model_dump(), **update})
    except ValueError as exc:
        raise JidoError(
            f"invalid compaction settings {update}: {exc}",
            error_type="llm_invalid_settings",
            details={"settings": update},
        ) from None


async def compact(
    llm: LlmPort,
    intent: RunCompaction,
    *,
    project_id: str,
    conversation_id: str,
    settings: Mapping[str, Any],
) -> CompactionCompleted | CompactionFailed:
    """Ask the model (``compact_model`` when set) for the summary; the result event, never a raise."""
    call_settings = {k: v for k, v in settings.items() if k not in ("system_prompt", "tools")}
    compact_model = settings.get("compact_model")
    if isinstance(compact_model, str) and compact_model:
        call_settings["model"] = compact_model
    request = LlmRequest(
        project_id=project_id,
        conversation_id=conversation_id,
        correlation_id=intent.correlation_id,
        request_id=intent.request_id,
        messages=summary_prompt(intent.messages, intent.instructions),
        tools=[],
        settings=call_settings,
    )

    async def quiet(text: str) -> None:  # the summary is not the assistant speaking
        return None

    started = time.monotonic()
    try:
        result = await llm.complete(request, quiet)
    except JidoError as exc:
        return CompactionFailed(
            request_id=intent.request_id, reason=intent.reason, error_type=exc.type, message=exc.message
        )
    except Exception as exc:  # a port that breaks its contract still ends the compaction
        return CompactionFailed(
            request_id=intent.request_id,
            reason=intent.reason,
            error_type="internal",
            message=f"{type(exc).__name__}: {exc}",
        )
    summary = result.content.strip()
    if not summary:
        return CompactionFailed(
            request_id=intent.request_id,
            reason=intent.reason,
            error_type="empty_summary",
            message="the model answered the summary request with no text",
        )
    before, after = token_counts(intent.context_tokens, intent.messages, intent.kept, summary)
    return CompactionCompleted(
        request_id=intent.request_id,
        reason=intent.reason,
        summary=summary,
        from_index=intent.from_index,
        to_index=intent.to_index,
        first_id=intent.first_id,
        last_id=intent.last_id,
        messages=len(intent.messages),
        tokens_before=before,
        tokens_after=after,
        model=result.model,
        usage=result.usage.model_dump(mode="json"),
        duration_ms=int((time.monotonic() - started) * 1000),
    )
