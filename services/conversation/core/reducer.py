"""The reducer: ``ingest`` enqueues, ``drain`` applies, ``replay`` rebuilds, ``recover`` resumes.

Pure and deterministic: no I/O, no clock, no random. Entries the core
generates get ids minted from a counter in the state
(``<project>:<conversation>:<n>``), their time is the time of their cause,
their correlation id that of their cause and their causation id the cause's
id — so the same input sequence always yields the same state, ids included.

Event sourcing inside: ``evolve.py`` is the only place the state changes
and depends on the entry alone; ``react.py`` also decides what follows an
applied entry (new entries, built from the catalogue's models, and intents).
Both dispatch on the entry's typed event (decoded once at the edge). Live
processing runs both, replay of a journal runs only ``evolve``, so
``replay(journal) == live state``. ``work.py`` holds the scratch state of one call.

A step costs what it changes, not what the conversation holds: the timeline
is appended to, never copied (``timeline.py``), and the context of an LLM
request is built from the entries added since the previous one (``context.py``).
"""

from __future__ import annotations

from collections.abc import Iterable

from jidocode.shared.events.conversation import (
    EXTERNAL_TYPES,
    CompactionRequested,
    LlmRequested,
    QueueOverflow,
)

from .context import context_messages
from .evolve import evolve
from .intents import ContinueDrain, Emit, Intent, RunLlm, RunToolIntent
from .react import apply, compaction_intent
from .signal import Signal
from .state import ConversationState, Limits, Status, initial_state
from .work import CORE_SOURCE, Work, close_turn, freeze, mint, thaw

__all__ = ["CORE_SOURCE", "drain", "ingest", "recover", "replay", "resume", "run_to_idle"]

Intents = tuple[Intent, ...]


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
        w = thaw(state)
        overflow = QueueOverflow(
            dropped_id=signal.id,
            dropped_type=signal.type,
            queue_size=state.queue_size,
            max_queue=state.limits.max_queue,
        )
        apply(w, mint(w, overflow, signal))
        return freeze(w), tuple(w.intents)
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
    w = thaw(state)
    steps = 0
    while w.queue and steps < state.limits.max_drain_steps:
        apply(w, w.queue.popleft())
        steps += 1
    if w.queue:
        w.intents.append(ContinueDrain(queued=len(w.queue)))
    return freeze(w), tuple(w.intents)


def replay(
    project_id: str, conversation_id: str, journal: Iterable[Signal], limits: Limits | None = None
) -> ConversationState:
    """Rebuild a state from its journal (the applied entries, in order)."""
    w = thaw(initial_state(project_id, conversation_id, limits))
    for entry in journal:
        if w.timeline.has((entry.id, entry.correlation_id)):
            continue  # a redelivered journal entry
        evolve(w, entry)
    return freeze(_settled(w))


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
    w = thaw(before)
    apply(w, tail[0])
    emitted = [intent.entry for intent in w.intents if isinstance(intent, Emit)]
    if len(emitted) <= len(tail) or [e.id for e in emitted[: len(tail)]] != [e.id for e in tail]:
        return state, recover(state)  # the step is whole (or not one we can retake)
    after = freeze(w)
    return after, (*(Emit(entry=e) for e in emitted[len(tail) :]), *recover(after))


def _replay_onto(state: ConversationState, entries: Iterable[Signal]) -> ConversationState:
    """``state`` with ``entries`` applied as :func:`replay` applies them."""
    w = thaw(state)
    for entry in entries:
        if w.timeline.has((entry.id, entry.correlation_id)):
            continue
        evolve(w, entry)
    return freeze(_settled(w))


def _settled(w: Work) -> Work:
    """``w`` rebuilt from a journal, with a turn that ended before 0317 (no entry) closed.

    A journal of this version never rests idle with a turn open: its end is in the same step.
    """
    if w.turn_open and w.status is Status.IDLE:
        close_turn(w)
    return w


def recover(state: ConversationState) -> Intents:
    """Intents to carry on after a rebuild: the LLM call and tool calls still outstanding."""
    intents: list[Intent] = []
    if state.status is Status.AWAITING_LLM and state.pending_llm is not None:
        for index in range(len(state.timeline) - 1, -1, -1):
            entry = state.timeline[index]
            if entry.id == state.pending_llm and entry.type == CompactionRequested.TYPE:
                intents.append(compaction_intent(entry, state.timeline.prefix(index + 1)))
                break
            if entry.id == state.pending_llm:
                intents.append(
                    RunLlm(
                        request_id=entry.id,
                        correlation_id=entry.correlation_id,
                        messages=context_messages(state.timeline.prefix(index + 1)),
                        turn=entry.event_as(LlmRequested).turn,
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
