"""The ``llm_context`` projection, built incrementally: OpenAI-style messages of a timeline.

The messages: a user message per :class:`UserMessage`; per LLM answer, at the
place of its request, one assistant message (its text and the tool calls the
reducer requested) followed by one ``tool`` message per call, in call order,
wherever in the timeline the results arrived. A call without a result
(cancelled, lost) gets a placeholder so the context stays a valid chat
transcript.

:class:`ContextBuilder` is a timeline fold (see ``timeline.py``): it takes one
entry at a time and keeps the messages up to date, so the context of each LLM
request costs what the new entries cost, not what the conversation holds.
Where an answer's messages go is fixed by the first entry that names its
request (the request itself, in the reducer's timelines); they are inserted
there when the answer arrives, before any user message that came meanwhile.
A placed message is never changed in place, only replaced, so the messages
handed out earlier stay as they were.

A ``conversation.compaction.completed`` entry replaces the messages of every
run anchored before its ``to_index`` (an earlier summary included) with one
summary message (:func:`summary_message`); the runs after it stay. Nothing
leaves the timeline: only this projection changes (docs/compaction-and-replay.md).

A ``conversation.rewound`` entry drops the run of the user message it names and every run
placed after it: the context is again what it was before that message (an answer to a model
call made before the message stays, wherever its result arrived). Nothing leaves the timeline
here either (docs/rewind.md).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from jidocode.shared.events.conversation import (
    AssistantMessage,
    Cancel,
    CompactionCompleted,
    CompactionFailed,
    CompactionRequested,
    LlmRequested,
    ToolCallCompleted,
    ToolCallFailed,
    ToolCallRequested,
    UserMessage,
)
from jidocode.shared.events.rewind import Rewound

from .signal import Signal
from .timeline import Timeline

__all__ = [
    "NO_RESULT",
    "SUMMARY_PREFIX",
    "ContextBuilder",
    "context_messages",
    "llm_context",
    "summary_message",
]

NO_RESULT = "[no result: the tool call was cancelled or lost]"
#: First line of the message that stands for the compacted part of a conversation.
SUMMARY_PREFIX = "[Summary of the earlier part of this conversation, which was compacted]"


def summary_message(summary: str) -> dict[str, Any]:
    """The context message standing for everything a compaction summarised."""
    return {"role": "user", "content": f"{SUMMARY_PREFIX}\n{summary}"}


def _tool_content(result: ToolCallCompleted | ToolCallFailed | None) -> str:
    if result is None:
        return NO_RESULT
    if isinstance(result, ToolCallFailed):
        return f"error ({result.error_type}): {result.message}"
    if isinstance(result.data, str):
        return result.data
    return json.dumps(result.data, sort_keys=True, ensure_ascii=False, default=str)


class _Run:
    """Consecutive messages placed together: a user message, or one answer and its tool messages."""

    __slots__ = ("anchor", "compacted", "size", "start", "user")

    def __init__(self, anchor: int, start: int, size: int, *, user: bool = False) -> None:
        #: Position in the timeline of the entry that fixes where the run goes (-1: a summary).
        self.anchor = anchor
        #: Index of the run's first message, and how many it has.
        self.start = start
        self.size = size
        #: A user message's run (where a kept turn begins).
        self.user = user
        #: Replaced by a compaction's summary, or dropped by a rewind: its messages are gone from
        #: the context.
        self.compacted = False


class _Answer:
    """What the timeline says so far about one LLM request's answer."""

    __slots__ = ("anchor", "calls", "run", "text", "tool_calls")

    def __init__(self, anchor: int) -> None:
        self.anchor = anchor
        self.text: str | None = None
        #: The answer's tool calls: (entry id, call), in call order.
        self.calls: list[tuple[str, ToolCallRequested]] = []
        self.tool_calls: list[dict[str, Any]] = []
        self.run: _Run | None = None


class ContextBuilder:
    """The ``llm_context`` of the entries added so far (a timeline fold)."""

    def __init__(self) -> None:
        self._messages: list[dict[str, Any]] = []
        #: The placed runs, in the order of their anchors (which is the order of the messages).
        self._runs: list[_Run] = []
        self._answers: dict[str, _Answer] = {}
        #: tool request id -> its first result, wherever it came
        self._results: dict[str, ToolCallCompleted | ToolCallFailed] = {}
        #: tool request id -> (answer, index of the call in it) of every call with that id
        self._calls: dict[str, list[tuple[_Answer, int]]] = {}
        self._position = 0
        #: The compaction request a summary may answer (a cancel makes a late summary stale).
        self._open_compaction: str | None = None

    def messages(self) -> tuple[dict[str, Any], ...]:
        """The messages now (a copy of the list; the messages themselves are shared: never change them)."""
        return tuple(self._messages)

    def add(self, entry: Signal) -> None:
        """Take the next timeline entry (dispatch on its typed event)."""
        position = self._position
        self._position += 1
        match entry.event:
            case UserMessage(text=text):
                self._messages.append({"role": "user", "content": text})
                self._runs.append(_Run(position, len(self._messages) - 1, 1, user=True))
            case CompactionRequested():
                self._open_compaction = entry.id
            case CompactionCompleted() as done:
                if done.request_id == self._open_compaction:
                    self._open_compaction = None
                    self._compact(done.to_index, done.summary)
            case CompactionFailed() | Cancel():
                self._open_compaction = None
            case Rewound(to_index=to_index):
                self._rewind(to_index)
            case ToolCallCompleted() | ToolCallFailed() as result:
                self._add_result(result)
            case LlmRequested():
                self._answer(entry.id, position)
            case AssistantMessage() as said:
                self._add_text(said, position)
            case ToolCallRequested() as call:
                self._add_call(entry.id, call, position)

    def _add_result(self, result: ToolCallCompleted | ToolCallFailed) -> None:
        if result.request_id in self._results:
            return
        self._results[result.request_id] = result
        for answer, index in self._calls.get(result.request_id, ()):
            assert answer.run is not None
            if not answer.run.compacted:
                self._messages[answer.run.start + 1 + index] = self._tool_message(*answer.calls[index])

    def _add_text(self, said: AssistantMessage, position: int) -> None:
        answer = self._answer(said.request_id, position)
        if answer.text is not None:
            return
        answer.text = said.text
        if answer.run is None:
            self._place(answer, [self._assistant_message(answer)])
        elif not answer.run.compacted:
            self._messages[answer.run.start] = self._assistant_message(answer)

    def _add_call(self, entry_id: str, call: ToolCallRequested, position: int) -> None:
        answer = self._answer(call.llm_request_id, position)
        answer.calls.append((entry_id, call))
        self._calls.setdefault(entry_id, []).append((answer, len(answer.calls) - 1))
        answer.tool_calls = [
            *answer.tool_calls,
            {
                "id": call.call_id,
                "type": "function",
                "function": {"name": call.name, "arguments": json.dumps(call.args, sort_keys=True)},
            },
        ]
        if answer.run is None:
            self._place(answer, [self._assistant_message(answer), self._tool_message(entry_id, call)])
        elif not answer.run.compacted:
            self._messages[answer.run.start] = self._assistant_message(answer)
            self._insert(answer.run, [self._tool_message(entry_id, call)])

    def cut(self, keep_turns: int) -> tuple[int, int] | None:
        """Where a compaction now would cut: ``(to_index, messages)``, or ``None`` when nothing new
        lies before the kept part.

        The kept part begins at the ``keep_turns``-th last user message; when that leaves
        nothing to summarise (one long turn), it is the last run alone (the latest answer and
        its tool messages). A cut is always between runs, so both parts are valid transcripts.
        """
        runs = [run for run in self._runs if not run.compacted and run.anchor >= 0]
        users = [i for i, run in enumerate(runs) if run.user]
        at = users[-keep_turns] if 0 < keep_turns <= len(users) else 0
        if at == 0:
            at = len(runs) - 1
        if at < 1:
            return None
        return runs[at].anchor, runs[at].start

    def _compact(self, to_index: int, summary: str) -> None:
        """Replace the runs anchored before ``to_index`` (an earlier summary too) by ``summary``."""
        n = 0
        while n < len(self._runs) and self._runs[n].anchor < to_index:
            n += 1
        gone = self._runs[:n]
        size = sum(run.size for run in gone)
        for run in gone:
            run.compacted = True
        del self._messages[:size]
        self._messages.insert(0, summary_message(summary))
        for run in self._runs[n:]:
            run.start += 1 - size
        self._runs[:n] = [_Run(-1, 0, 1)]

    def holds_user_message(self, position: int) -> bool:
        """Whether the user message at timeline ``position`` is in the context as it was sent
        (not summarised by a compaction, not dropped by a rewind)."""
        return any(run.user and run.anchor == position for run in self._runs)

    def rewind_split(self, to_index: int) -> tuple[int, int]:
        """``(kept, dropped)``: the context messages a rewind to ``to_index`` keeps and drops."""
        n = self._first_run_from(to_index)
        kept = self._runs[n].start if n < len(self._runs) else len(self._messages)
        return kept, len(self._messages) - kept

    def _first_run_from(self, to_index: int) -> int:
        """Index of the first run anchored at ``to_index`` or later (``len(runs)``: none)."""
        n = len(self._runs)
        while n > 0 and self._runs[n - 1].anchor >= to_index:
            n -= 1
        return n

    def _rewind(self, to_index: int) -> None:
        """Drop the runs anchored at ``to_index`` or later (the rewound message's and after)."""
        n = self._first_run_from(to_index)
        gone = self._runs[n:]
        if not gone:
            return
        for run in gone:
            run.compacted = True
        del self._messages[gone[0].start :]
        del self._runs[n:]

    def _answer(self, request_id: str, position: int) -> _Answer:
        answer = self._answers.get(request_id)
        if answer is None:
            answer = self._answers[request_id] = _Answer(position)
        return answer

    def _assistant_message(self, answer: _Answer) -> dict[str, Any]:
        message: dict[str, Any] = {"role": "assistant", "content": answer.text}
        if answer.tool_calls:
            message["tool_calls"] = answer.tool_calls
        return message

    def _tool_message(self, entry_id: str, call: ToolCallRequested) -> dict[str, Any]:
        return {
            "role": "tool",
            "tool_call_id": call.call_id,
            "name": call.name,
            "content": _tool_content(self._results.get(entry_id)),
        }

    def _place(self, answer: _Answer, messages: list[dict[str, Any]]) -> None:
        """Insert a new run at its anchor: after every run anchored before it (usually the last)."""
        index = len(self._runs)
        while index > 0 and self._runs[index - 1].anchor > answer.anchor:
            index -= 1
        start = self._runs[index].start if index < len(self._runs) else len(self._messages)
        run = _Run(answer.anchor, start, 0)
        self._runs.insert(index, run)
        answer.run = run
        self._insert(run, messages)

    def _insert(self, run: _Run, messages: list[dict[str, Any]]) -> None:
        """Append ``messages`` to ``run``, moving the runs after it (usually none)."""
        at = run.start + run.size
        self._messages[at:at] = messages
        run.size += len(messages)
        for later in reversed(self._runs):
            if later is run:
                break
            later.start += len(messages)


def context_messages(entries: Iterable[Signal]) -> tuple[dict[str, Any], ...]:
    """OpenAI-style messages of ``entries`` (a timeline or a prefix of one).

    A :class:`Timeline` keeps its builder, so asking again after more entries
    were appended costs only the new entries (and one copy of the list).
    """
    if isinstance(entries, Timeline):
        return entries.fold(ContextBuilder).messages()
    builder = ContextBuilder()
    for entry in entries:
        builder.add(entry)
    return builder.messages()


def llm_context(entries: Iterable[Signal]) -> list[dict[str, Any]]:
    """The ``llm_context`` projection of ``entries`` (see :func:`context_messages`)."""
    return list(context_messages(entries))
