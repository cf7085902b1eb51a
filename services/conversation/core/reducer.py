"""The reducer: ``ingest`` enqueues, ``drain`` applies, ``replay`` rebuilds, ``recover`` resumes.

Pure and deterministic: no I/O, no clock, no random. Entries the core
generates get ids minted from a counter in the state
(``<project>:<conversation>:<n>``), their time is the time of their cause,
their correlation id that of their cause and their causation id the cause's
id — so the same input sequence always yields the same state, ids included.

Event sourcing inside: :func:`_evolve` is the only place the state changes
and depends on the entry alone; :func:`_apply` also decides what follows an
applied entry (new entries, built from the catalogue's models, and intents).
Live processing runs both, replay of a journal runs only ``_evolve``, so
``replay(journal) == live state``.

A step costs what it changes, not what the conversation holds: the timeline
is appended to, never copied (``timeline.py``), and the context of an LLM
request is built from the entries added since the previous one (``context.py``).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from jidocode.shared.events import EventModel
from jidocode.shared.events.conversation import (
    EXTERNAL_TYPES,
    AssistantMessage,
    Cancel,
    Compact,
    CompactionCompleted,
    CompactionFailed,
    CompactionReason,
    CompactionRequested,
    ConversationError,
    LlmCompleted,
    LlmFailed,
    LlmRequested,
    LoopStopped,
    QueueOverflow,
    Resume,
    SubagentCompleted,
    SubagentStarted,
    ToolCallCompleted,
    ToolCallFailed,
    ToolCallRequested,
    TurnEnded,
    TurnEndOutcome,
    UserMessage,
)

from .context import ContextBuilder, context_messages
from .intents import (
    CancelLlm,
    CancelPendingSubagents,
    CancelPendingTools,
    ContinueDrain,
    Emit,
    Intent,
    RunCompaction,
    RunLlm,
    RunToolIntent,
)
from .signal import Signal
from .state import (
    ConversationState,
    Limits,
    PendingToolCall,
    Status,
    SubagentInfo,
    Trigger,
    initial_state,
    next_status,
)
from .timeline import Timeline

__all__ = ["CORE_SOURCE", "drain", "ingest", "recover", "replay", "resume", "run_to_idle"]

#: ``source`` of the entries the core generates.
CORE_SOURCE = "conversation/core"

Intents = tuple[Intent, ...]


@dataclass
class _Work:
    """Scratch copy of a state, private to one reducer call.

    Each step costs what it changes, not what the conversation holds: the
    timeline is appended to without a copy, and ``subagents`` (which only
    grows) is copied on its first change.
    """

    base: ConversationState
    status: Status
    timeline: Timeline
    queue: deque[Signal]
    pending_llm: str | None
    pending_tools: dict[str, PendingToolCall]
    pending_subagents: list[str]
    subagents: Mapping[str, SubagentInfo]
    turns: int
    unanswered: bool
    next_seq: int
    context_tokens: int = 0
    context_window: int = 0
    compact_wanted: bool = False
    overflow_compacted: bool = False
    compacted_to: int = 0
    turn_open: bool = False
    turn_messages: list[str] = field(default_factory=list)
    waiting_messages: list[str] = field(default_factory=list)
    turn_overflowed: bool = False
    intents: list[Intent] = field(default_factory=list)
    subagents_copied: bool = False

    def set_subagent(self, info: SubagentInfo) -> None:
        if not self.subagents_copied:
            self.subagents = dict(self.subagents)
            self.subagents_copied = True
        assert isinstance(self.subagents, dict)
        self.subagents[info.subagent_id] = info


def _thaw(state: ConversationState) -> _Work:
    return _Work(
        base=state,
        status=state.status,
        timeline=state.timeline,
        queue=deque(state.event_queue),
        pending_llm=state.pending_llm,
        pending_tools={call.request_id: call for call in state.pending_tool_calls},
        pending_subagents=list(state.pending_subagents),
        subagents=state.subagents,
        turns=state.turns,
        unanswered=state.unanswered,
        next_seq=state.next_seq,
        context_tokens=state.context_tokens,
        context_window=state.context_window,
        compact_wanted=state.compact_wanted,
        overflow_compacted=state.overflow_compacted,
        compacted_to=state.compacted_to,
        turn_open=state.turn_open,
        turn_messages=list(state.turn_messages),
        waiting_messages=list(state.waiting_messages),
        turn_overflowed=state.turn_overflowed,
    )


def _freeze(w: _Work) -> ConversationState:
    return w.base.model_copy(
        update={
            "status": w.status,
            "timeline": w.timeline,
            "event_queue": tuple(w.queue),
            "queue_size": len(w.queue),
            "pending_llm": w.pending_llm,
            "pending_tool_calls": tuple(w.pending_tools.values()),
            "pending_subagents": tuple(w.pending_subagents),
            "subagents": w.subagents,
            "turns": w.turns,
            "unanswered": w.unanswered,
            "next_seq": w.next_seq,
            "context_tokens": w.context_tokens,
            "context_window": w.context_window,
            "compact_wanted": w.compact_wanted,
            "overflow_compacted": w.overflow_compacted,
            "compacted_to": w.compacted_to,
            "turn_open": w.turn_open,
            "turn_messages": tuple(w.turn_messages),
            "waiting_messages": tuple(w.waiting_messages),
            "turn_overflowed": w.turn_overflowed,
        }
    )


def _transition(w: _Work, trigger: Trigger) -> None:
    status = next_status(w.status, trigger)
    if status is not None:
        w.status = status


def _mint(w: _Work, event: EventModel, cause: Signal) -> Signal:
    """The timeline entry of ``event``, generated by the core because of ``cause``."""
    return Signal.of(
        event,
        id=f"{w.base.project_id}:{w.base.conversation_id}:{w.next_seq}",
        source=CORE_SOURCE,
        correlation_id=cause.correlation_id,
        causation_id=cause.id,
        time=cause.time,
    )


# -- evolve: the only state change, a function of the entry alone ------------------


def _evolve(w: _Work, s: Signal) -> None:
    w.timeline = w.timeline.append(s)
    if s.source == CORE_SOURCE:
        w.next_seq += 1
    d = s.data
    match s.type:
        case UserMessage.TYPE:
            if w.status is Status.IDLE:
                _close_turn(w)  # a journal from before 0317: its turns ended without an entry
            w.unanswered = True
            w.turns = 0
            w.overflow_compacted = False
            w.waiting_messages.append(s.id)
        case LlmRequested.TYPE:
            _transition(w, Trigger.LLM_REQUESTED)
            w.pending_llm = s.id
            w.turns += 1
            w.unanswered = False
            w.turn_open = True
            w.turn_messages.extend(w.waiting_messages)  # the call answers them: they join the turn
            w.waiting_messages.clear()
        case TurnEnded.TYPE:
            _close_turn(w)
            ended = set(d.get("message_ids") or ())
            w.waiting_messages = [m for m in w.waiting_messages if m not in ended]
        case LlmCompleted.TYPE:
            if d.get("request_id") == w.pending_llm and w.pending_llm is not None:
                w.pending_llm = None
                _transition(
                    w, Trigger.LLM_ANSWERED_WITH_TOOLS if d.get("tool_calls") else Trigger.LLM_ANSWERED
                )
                used = d.get("usage") or {}
                w.context_tokens = int(used.get("prompt_tokens") or 0) + int(
                    used.get("completion_tokens") or 0
                )
                w.context_window = int(d.get("context_window") or 0)
                w.overflow_compacted = False
        case LlmFailed.TYPE:
            if d.get("request_id") == w.pending_llm and w.pending_llm is not None:
                w.pending_llm = None
                _transition(w, Trigger.LLM_FAILED)
        case ToolCallRequested.TYPE:
            w.pending_tools[s.id] = PendingToolCall(
                request_id=s.id,
                call_id=str(d["call_id"]),
                name=str(d["name"]),
                args=dict(d.get("args") or {}),
                llm_request_id=str(d["llm_request_id"]),
                correlation_id=s.correlation_id,
            )
        case ToolCallCompleted.TYPE | ToolCallFailed.TYPE:
            w.pending_tools.pop(str(d.get("request_id")), None)
        case LoopStopped.TYPE:
            _transition(w, Trigger.LOOP_STOPPED)
        case Cancel.TYPE:
            _transition(w, Trigger.CANCEL)
            w.pending_llm = None
            w.pending_tools.clear()
            for sid in w.pending_subagents:
                w.set_subagent(w.subagents[sid].model_copy(update={"status": "cancelled"}))
            w.pending_subagents.clear()
        case Resume.TYPE:
            if w.status is Status.CANCELLED:
                _close_turn(w)  # ended by the cancel (before 0317: without an entry)
            _transition(w, Trigger.RESUME)
        case Compact.TYPE:
            if w.status.running:
                w.compact_wanted = True  # compacted before the turn's next model call
        case CompactionRequested.TYPE:
            _transition(w, Trigger.LLM_REQUESTED)
            w.pending_llm = s.id
            w.compact_wanted = False
            if d.get("reason") == "overflow":
                w.overflow_compacted = True
                w.turn_overflowed = w.turn_open
        case CompactionCompleted.TYPE:
            if d.get("request_id") == w.pending_llm and w.pending_llm is not None:
                w.pending_llm = None
                _transition(w, Trigger.LLM_ANSWERED)
                w.context_tokens = int(d.get("tokens_after") or 0)
                w.compacted_to = int(d["to_index"])
        case CompactionFailed.TYPE:
            if d.get("request_id") == w.pending_llm and w.pending_llm is not None:
                w.pending_llm = None
                _transition(w, Trigger.LLM_FAILED)
        case SubagentStarted.TYPE:
            sid = str(d["subagent_id"])
            w.set_subagent(
                SubagentInfo(
                    subagent_id=sid,
                    name=str(d.get("name") or ""),
                    request_id=str(d.get("request_id") or ""),
                    description=str(d.get("description") or ""),
                    # started just before the parent's cancel reached its runner: cancelled with it
                    status="cancelled" if w.status is Status.CANCELLED else "running",
                )
            )
            if sid not in w.pending_subagents and w.status is not Status.CANCELLED:
                w.pending_subagents.append(sid)
        case SubagentCompleted.TYPE:
            sid = str(d["subagent_id"])
            info = w.subagents.get(sid) or SubagentInfo(subagent_id=sid)
            w.set_subagent(
                info.model_copy(
                    update={"status": str(d.get("status") or "completed"), "result": d.get("result")}
                )
            )
            if sid in w.pending_subagents:
                w.pending_subagents.remove(sid)


def _close_turn(w: _Work) -> None:
    w.turn_open = False
    w.turn_messages.clear()
    w.turn_overflowed = False


# -- react: what follows an applied entry ------------------------------------------


def _apply(w: _Work, s: Signal) -> None:
    before_llm = w.pending_llm
    before_tools = tuple(w.pending_tools)
    before_subagents = tuple(w.pending_subagents)
    _evolve(w, s)
    w.intents.append(Emit(entry=s))
    t, d = s.type, s.data
    if t == Cancel.TYPE:
        if before_llm is not None:
            w.intents.append(CancelLlm(request_id=before_llm))
        w.intents.append(CancelPendingTools(request_ids=before_tools, correlation_id=s.correlation_id))
        w.intents.append(
            CancelPendingSubagents(subagent_ids=before_subagents, correlation_id=s.correlation_id)
        )
        _end_turn(w, s, "cancelled", error_type="cancelled", message=str(d.get("reason") or "cancelled"))
        return
    if w.status is Status.CANCELLED:
        return  # no orchestration until resume
    match t:
        case UserMessage.TYPE:
            if w.status is Status.IDLE:
                _request_llm(w, s)
        case Resume.TYPE:
            if w.status is Status.IDLE and w.unanswered:
                _request_llm(w, s)  # a message received while cancelled is answered now (seed 002)
        case LlmRequested.TYPE:
            w.intents.append(
                RunLlm(
                    request_id=s.id,
                    correlation_id=s.correlation_id,
                    messages=context_messages(w.timeline),
                    turn=int(d["turn"]),
                )
            )
        case ToolCallRequested.TYPE:
            call = w.pending_tools[s.id]
            w.intents.append(
                RunToolIntent(
                    request_id=s.id,
                    call_id=call.call_id,
                    name=call.name,
                    args=call.args,
                    correlation_id=s.correlation_id,
                )
            )
        case LlmCompleted.TYPE if before_llm is not None and d.get("request_id") == before_llm:
            calls = list(d.get("tool_calls") or [])
            text = str(d.get("content") or "")
            offered = d.get("offered_tools")
            if text or not calls:
                answer = _mint(w, AssistantMessage(text=text, request_id=before_llm), s)
                _apply(w, answer)
                if not calls:
                    _end_turn(w, s, "completed", answer_id=answer.id, text=text)
            refused: list[Signal] = []
            for index, call in enumerate(calls):
                args = call.get("arguments")
                requested = ToolCallRequested(
                    call_id=str(call.get("id") or f"call_{index}"),
                    name=str(call.get("name") or ""),
                    args=args if isinstance(args, dict) else {"value": args},
                    llm_request_id=before_llm,
                )
                entry = _mint(w, requested, s)
                if offered is None or requested.name in offered:
                    _apply(w, entry)
                else:  # recorded (the model asked for it), never run
                    _evolve(w, entry)
                    w.intents.append(Emit(entry=entry))
                    refused.append(entry)
            # after every call is pending, so the last answer (not the first) asks the model again
            for entry in refused:
                _apply(w, _mint(w, _unknown_tool(entry, list(offered or [])), entry))
            if not calls and w.unanswered:
                _request_llm(w, s)
        case ToolCallCompleted.TYPE | ToolCallFailed.TYPE:
            if (
                d.get("request_id") in before_tools
                and not w.pending_tools
                and w.status is Status.AWAITING_TOOLS
            ):
                _request_llm(w, s)
        case LlmFailed.TYPE if (
            before_llm is not None
            and d.get("request_id") == before_llm
            and d.get("error_type") == "llm_context_overflow"
            and not w.overflow_compacted
        ):
            if not _request_compaction(w, s, "overflow"):  # then one retry (see CompactionCompleted)
                _end_turn(w, s, "failed", **_failure(d))
        case LlmFailed.TYPE if before_llm is not None and d.get("request_id") == before_llm:
            _end_turn(w, s, "failed", **_failure(d))
        case LoopStopped.TYPE:
            _end_turn(
                w,
                s,
                "stopped",
                error_type=str(d.get("reason") or "stopped"),
                message=f"the loop stopped ({d.get('reason')}) after {d.get('turns')} of "
                f"{d.get('max_turns')} turns",
            )
        case Compact.TYPE if w.status is Status.IDLE:
            if not _request_compaction(w, s, "manual", d.get("instructions")):
                error = ConversationError(
                    error_type="nothing_to_compact",
                    message="nothing to compact: the context holds only the turns a compaction keeps "
                    "(llm.compact_keep_turns) and an earlier summary",
                    details={"compacted_to": w.compacted_to},
                )
                _apply(w, _mint(w, error, s))
        case CompactionRequested.TYPE:
            w.intents.append(_compaction_intent(s, w.timeline))
        case CompactionCompleted.TYPE | CompactionFailed.TYPE if (
            before_llm is not None and d.get("request_id") == before_llm
        ):
            reason = d.get("reason")
            if t == CompactionFailed.TYPE and reason == "overflow":
                # the retry would overflow again: the turn ends with its failure
                _end_turn(
                    w,
                    s,
                    "failed",
                    error_type="llm_context_overflow",
                    message=f"the context is over the model's window and its compaction failed: "
                    f"{d.get('message') or d.get('error_type')}",
                )
                return
            if reason != "manual" or w.unanswered or w.turn_open:
                _request_llm(w, s, compact=False)


def _failure(d: Mapping[str, object]) -> dict[str, object]:
    """The end fields of a turn ended by the ``conversation.llm.failed`` payload ``d``."""
    return {
        "error_type": str(d.get("error_type") or "llm_error"),
        "message": str(d.get("message") or ""),
        "retryable": bool(d.get("retryable")),
    }


def _end_turn(w: _Work, cause: Signal, outcome: TurnEndOutcome, **fields: object) -> None:
    """Apply the ``conversation.turn.ended`` entry of the open turn.

    A turn opens with the first model call after the conversation was idle. A turn that does
    not complete also ends the user messages still waiting for a model call (their senders
    would wait for nothing): with a cancel even when no turn is open. A completed turn leaves
    them to the next turn, which starts at once.
    """
    waiting = w.waiting_messages if outcome != "completed" else []
    if not w.turn_open and not (outcome == "cancelled" and waiting):
        return
    messages = [*w.turn_messages, *waiting]
    ended = TurnEnded.model_validate(
        {
            **fields,
            "outcome": outcome,
            "message_ids": messages,
            "turns": w.turns,
            "overflow_retried": w.turn_overflowed,
        }
    )
    _apply(w, _mint(w, ended, cause))


def _unknown_tool(requested: Signal, offered: list[str]) -> ToolCallFailed:
    """The answer to a call of a tool the model was not offered: it never reaches the tool runner."""
    d = requested.data
    name = str(d.get("name") or "")
    return ToolCallFailed(
        request_id=requested.id,
        call_id=str(d.get("call_id") or ""),
        name=name,
        error_type="unknown_tool",
        message=f"there is no tool {name!r} here; the tools offered are: {', '.join(offered) or 'none'}",
        details={"tool": name, "offered": offered},
    )


def _request_llm(w: _Work, cause: Signal, *, compact: bool = True) -> None:
    limit = w.base.limits.max_turns
    if w.turns >= limit:
        _apply(w, _mint(w, LoopStopped(reason="max_turns", turns=w.turns, max_turns=limit), cause))
        return
    if compact and _wants_compaction(w):
        reason: CompactionReason = "manual" if w.compact_wanted else "threshold"
        if _request_compaction(w, cause, reason):
            return  # the model call follows the summary (see CompactionCompleted)
    _apply(w, _mint(w, LlmRequested(turn=w.turns + 1), cause))


# -- compaction (docs/compaction-and-replay.md) -------------------------------------


def _wants_compaction(w: _Work) -> bool:
    """A compaction is asked for, or the last model call filled ``compact_at`` of its window."""
    at = w.base.limits.compact_at
    full = at > 0 and w.context_window > 0 and w.context_tokens >= at * w.context_window
    return w.compact_wanted or full


def _request_compaction(
    w: _Work, cause: Signal, reason: CompactionReason, instructions: object = None
) -> bool:
    """Apply a ``compaction.requested`` entry when there is something to summarise; whether it was."""
    cut = w.timeline.fold(ContextBuilder).cut(w.base.limits.compact_keep_turns)
    if cut is None:
        w.compact_wanted = False
        return False
    to_index, messages = cut
    total = len(context_messages(w.timeline))
    requested = CompactionRequested(
        reason=reason,
        from_index=min(w.compacted_to, to_index - 1),
        to_index=to_index,
        messages=messages,
        kept=total - messages,
        context_tokens=w.context_tokens,
        context_window=w.context_window,
        instructions=instructions if isinstance(instructions, str) and instructions else None,
    )
    _apply(w, _mint(w, requested, cause))
    return True


def _compaction_intent(requested: Signal, timeline: Timeline) -> RunCompaction:
    """The effect of a ``compaction.requested`` entry, ``timeline`` ending with it."""
    d = requested.data
    context = context_messages(timeline)
    n = int(d["messages"])
    from_index, to_index = int(d["from_index"]), int(d["to_index"])
    return RunCompaction(
        request_id=requested.id,
        correlation_id=requested.correlation_id,
        reason=d["reason"],
        from_index=from_index,
        to_index=to_index,
        first_id=timeline[from_index].id,
        last_id=timeline[to_index - 1].id,
        messages=context[:n],
        kept=context[n:],
        context_tokens=int(d.get("context_tokens") or 0),
        instructions=d.get("instructions"),
    )


# -- public API -------------------------------------------------------------------


def ingest(state: ConversationState, signal: Signal) -> tuple[ConversationState, Intents]:
    """Enqueue ``signal`` unless it is a duplicate or the queue is full.

    A duplicate ``(id, correlation_id)`` is ignored. At a full queue a NEW
    input from outside (:data:`EXTERNAL_TYPES`) is dropped and a
    :class:`QueueOverflow` entry is applied (and emitted); nothing already
    accepted is lost. What answers the conversation's own requests (LLM and tool
    results, an approval question) is always taken: dropping it would leave the
    conversation waiting for good. There are only as many of those as requests
    outstanding, so the queue stays bounded.
    """
    if state.is_seen(signal):
        return state, ()
    if state.queue_size >= state.limits.max_queue and signal.type in EXTERNAL_TYPES:
        w = _thaw(state)
        overflow = QueueOverflow(
            dropped_id=signal.id,
            dropped_type=signal.type,
            queue_size=state.queue_size,
            max_queue=state.limits.max_queue,
        )
        _apply(w, _mint(w, overflow, signal))
        return _freeze(w), tuple(w.intents)
    new = state.model_copy(
        update={"event_queue": (*state.event_queue, signal), "queue_size": state.queue_size + 1}
    )
    return new, ()


def drain(state: ConversationState) -> tuple[ConversationState, Intents]:
    """Apply at most ``limits.max_drain_steps`` queued signals, in order.

    Returns the new state and the intents, in order: an ``emit`` for every new
    timeline entry, ``run_llm``/``run_tool``/cancel intents as decided, and a
    final ``continue_drain`` when signals are still queued.
    """
    if not state.event_queue:
        return state, ()
    w = _thaw(state)
    steps = 0
    while w.queue and steps < state.limits.max_drain_steps:
        _apply(w, w.queue.popleft())
        steps += 1
    if w.queue:
        w.intents.append(ContinueDrain(queued=len(w.queue)))
    return _freeze(w), tuple(w.intents)


def replay(
    project_id: str, conversation_id: str, journal: Iterable[Signal], limits: Limits | None = None
) -> ConversationState:
    """Rebuild a state from its journal (the applied entries, in order)."""
    w = _thaw(initial_state(project_id, conversation_id, limits))
    for entry in journal:
        if w.timeline.has((entry.id, entry.correlation_id)):
            continue  # a redelivered journal entry
        _evolve(w, entry)
    return _freeze(_settled(w))


def resume(
    project_id: str, conversation_id: str, journal: Iterable[Signal], limits: Limits | None = None
) -> tuple[ConversationState, Intents]:
    """Rebuild from the journal and carry on: the state, and what to do first.

    A step journals its entries one fenced append after another (the opener — a
    user message or a directive's result — then the entries it leads to), so a
    crash between two appends leaves the journal ending in the middle of a step.
    :func:`replay` alone would then wait for nothing. Here the last step is taken
    again from the state before it: the reducer is deterministic and its entry ids
    come from the state, so the step yields the same entries; when the journal
    holds only a prefix of them, the rest come back as ``Emit`` intents (to be
    journaled before anything else), and the state is the one after the whole
    step. Then :func:`recover`'s intents for that state (the LLM call and tool
    calls outstanding, a drain to continue).
    """
    entries = list(journal)
    opener = next((i for i in range(len(entries) - 1, -1, -1) if entries[i].source != CORE_SOURCE), None)
    if opener is None:
        state = replay(project_id, conversation_id, entries, limits)
        return state, recover(state)
    before = replay(project_id, conversation_id, entries[:opener], limits)
    state = _replay_onto(before, entries[opener:])
    tail = entries[opener:]
    if before.is_seen(tail[0]):
        return state, recover(state)  # a redelivered opener: not a step of its own
    w = _thaw(before)
    _apply(w, tail[0])
    emitted = [intent.entry for intent in w.intents if isinstance(intent, Emit)]
    if len(emitted) <= len(tail) or [e.id for e in emitted[: len(tail)]] != [e.id for e in tail]:
        return state, recover(state)  # the step is whole (or not one we can retake)
    after = _freeze(w)
    return after, (*(Emit(entry=e) for e in emitted[len(tail) :]), *recover(after))


def _replay_onto(state: ConversationState, entries: Iterable[Signal]) -> ConversationState:
    """``state`` with ``entries`` applied as :func:`replay` applies them."""
    w = _thaw(state)
    for entry in entries:
        if w.timeline.has((entry.id, entry.correlation_id)):
            continue
        _evolve(w, entry)
    return _freeze(_settled(w))


def _settled(w: _Work) -> _Work:
    """``w`` rebuilt from a journal, with a turn that ended before 0317 (no entry) closed.

    A journal of this version never rests idle with a turn open: its end is in the same step.
    """
    if w.turn_open and w.status is Status.IDLE:
        _close_turn(w)
    return w


def recover(state: ConversationState) -> Intents:
    """Intents to carry on after a rebuild: the LLM call and tool calls still outstanding."""
    intents: list[Intent] = []
    if state.status is Status.AWAITING_LLM and state.pending_llm is not None:
        for index in range(len(state.timeline) - 1, -1, -1):
            entry = state.timeline[index]
            if entry.id == state.pending_llm and entry.type == CompactionRequested.TYPE:
                intents.append(_compaction_intent(entry, state.timeline.prefix(index + 1)))
                break
            if entry.id == state.pending_llm:
                intents.append(
                    RunLlm(
                        request_id=entry.id,
                        correlation_id=entry.correlation_id,
                        messages=context_messages(state.timeline.prefix(index + 1)),
                        turn=int(entry.data["turn"]),
                    )
                )
                break
    if state.status is not Status.CANCELLED:
        for call in state.pending_tool_calls:
            intents.append(
                RunToolIntent(
                    request_id=call.request_id,
                    call_id=call.call_id,
                    name=call.name,
                    args=call.args,
                    correlation_id=call.correlation_id,
                )
            )
    if state.event_queue:
        intents.append(ContinueDrain(queued=state.queue_size))
    return tuple(intents)


def run_to_idle(state: ConversationState, signals: Iterable[Signal]) -> tuple[ConversationState, Intents]:
    """Ingest each signal and drain until the queue is empty (tests, bench, tools)."""
    out: list[Intent] = []
    for signal in signals:
        state, intents = ingest(state, signal)
        out.extend(intents)
        while state.event_queue:
            state, intents = drain(state)
            out.extend(i for i in intents if not isinstance(i, ContinueDrain))
    return state, tuple(out)
