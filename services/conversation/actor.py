"""One conversation's actor: the shell around the pure core.

It rebuilds the state from the journal, carries on what was outstanding
(:func:`recover`), then consumes the conversation's input stream and the
results of its own directives through one mailbox, one signal at a time:
``ingest`` → ``drain`` → intents. Intents become directives here:

* ``emit``: the entries of one step are appended to the journal as one message
  (fenced, effectively once), then published in one flush on
  ``jido.evt.<p>.<c>.<type>`` (kept by ``STREAM_EVENTS``: :mod:`.outbox`);
* ``run_llm`` / ``run_tool``: a task calling the :class:`LlmPort` / :class:`ToolPort`;
  its result is a signal whose id derives from the request id (:mod:`.outcomes`);
* ``cancel_*``: cancel those tasks and tell the tool runner.

Input comes from the replica's one input consumer and, at load, from the stream
(:mod:`.input_dispatch`), each stream sequence once, in order, validated there once.

A journal failure stops the actor (crash-only): the runtime rebuilds it. A step the
store had no room for is first told as a failed turn (:mod:`.storage_notice`).

Idle: once it has had nothing to do (:meth:`quiescent`) for ``idle_timeout_s`` since its
last activity (at load: its last journal entry's time), :meth:`run` returns and the runtime
releases it; ``input_seq`` (the input applied) tells whether input came meanwhile.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Coroutine
from datetime import UTC, datetime
from typing import Any, Final

from nats.aio.msg import Msg
from nats.aio.subscription import Subscription

from jidocode.shared import subjects
from jidocode.shared.envelope import Envelope, decode, now_iso
from jidocode.shared.errors import JidoError, StorageFull
from jidocode.shared.events.conversation import (
    ApprovalRequested,
    AssistantDelta,
    ConversationError,
    LlmCompleted,
    LlmFailed,
    ToolCallCompleted,
    ToolCallFailed,
)

from .compaction import compact
from .core import (
    CancelLlm,
    CancelPendingSubagents,
    CancelPendingTools,
    ContinueDrain,
    ConversationState,
    Emit,
    Intent,
    Limits,
    RunCompaction,
    RunLlm,
    RunToolIntent,
    Signal,
    Status,
    drain,
    ingest,
    project,
    resume,
)
from .host import ActorHost
from .inbox import ValidatedInput
from .input_dispatch import ConversationInput, InputDispatch
from .llm.options import ToolExposure
from .outbox import APPROVAL_SOURCE, publish_step
from .outcomes import LLM_SOURCE, TOOLS_SOURCE, call_tool, result_signal, tool_failure
from .ports import LlmRequest, LlmToolSpec, window_of
from .record import ConversationRecord
from .storage_notice import tell_storage_full
from .subagents.core import TASK_TOOL
from .subagents.runner import ParentView, SubagentRunner
from .tracing import TurnTraces

__all__ = ["LLM_SOURCE", "TOOLS_SOURCE", "ConversationActor", "ValidatedInput"]

#: How long a model call waits for the ``task`` tool's templates before it goes without it.
TASK_SPEC_WAIT_S = 5.0

log = logging.getLogger("jidocode.conversation.actor")

#: Key prefix of the tasks that ask the tool runner to cancel a call.
_CANCEL_PREFIX: Final = "cancel:"

#: The mailbox item that asks for the next drain step (the reducer's ``continue_drain``).
CONTINUE: Final = "continue"

#: A mailbox item: a signal and the ``JIDO_CONV_IN`` sequence it came from (0 for a
#: directive's result), :data:`CONTINUE`, or ``None``, the tick that asks whether the actor is idle.
_Item = tuple[Signal, int] | str | None


def idle_age(last_entry_time: str | None) -> float:
    """Seconds since the journal's last entry (``time``, ISO 8601); 0 when unknown or ahead."""
    try:
        when = datetime.fromisoformat(last_entry_time or "")
    except ValueError:
        return 0.0
    when = when if when.tzinfo else when.replace(tzinfo=UTC)
    return max(0.0, (datetime.now(UTC) - when).total_seconds())


class ConversationActor:
    def __init__(
        self, runtime: ActorHost, record: ConversationRecord, limits: Limits, *, inputs: InputDispatch
    ) -> None:
        self.rt = runtime
        self.record = record
        self.project_id = record.project_id
        self.conversation_id = record.conversation_id
        self.limits = limits
        self.state: ConversationState | None = None
        self.last_seq = 0
        #: The ``JIDO_CONV_IN`` sequence of the latest input applied (or deduped).
        self.input_seq = 0
        self.mailbox: asyncio.Queue[_Item] = asyncio.Queue()
        self.tasks: dict[str, asyncio.Task[None]] = {}
        self.ready = asyncio.Event()
        self._asks: Subscription | None = None
        self._cache: dict[str, tuple[tuple[int, int], Any]] = {}
        #: The conversation's input, from the replica's input consumer and the stream.
        self.input = ConversationInput(
            runtime.bus,
            inputs,
            record,
            max_data_bytes=runtime.settings.max_message_bytes,
            take=self._take_input,
        )
        #: What the runtime's ``send_event`` validated and is publishing (taken by content).
        self.validated: ValidatedInput = self.input.validated
        self._last_active = 0.0
        self._idle_timer: asyncio.TimerHandle | None = None
        self._closed = False
        #: Runs this conversation's ``task`` calls (created on the first one: ``subagents``).
        self._subagents: SubagentRunner | None = None
        #: The turns in flight as spans and metrics (``tracing.py``).
        self.traces = TurnTraces(runtime.bus.tracer, self.project_id, self.conversation_id)

    # -- lifecycle ---------------------------------------------------------------

    async def run(self) -> None:
        """Rebuild, carry on, then consume; returns once the conversation is idle (see the module docstring)."""
        p, c = self.project_id, self.conversation_id
        entries, self.last_seq = await self.rt.journal.read(p, c)
        idle_for = idle_age(entries[-1].time if entries else None)
        # A step cut short by a crash between its appends is carried on (its missing entries
        # first), then what is outstanding is started again (``resume``).
        self.state, first = resume(p, c, entries, self.limits)
        self.ready.set()
        log.info("conversation %s/%s rebuilt from %d journal entries", p, c, len(entries))
        # the tool runner asks for approvals on the conversation's output: journaled here, beside
        # the answers that come on the input, so the timeline shows both (listening before the
        # recovered tool calls are sent again, which may ask)
        self._asks = await self.rt.bus.nc.subscribe(
            subjects.conversation_out(p, c, ApprovalRequested.TYPE), cb=self._on_approval_requested
        )
        await self._execute(first)
        try:
            await self.input.open()
            # the idle clock runs from the last activity the journal shows (a check is queued
            # behind the backlog: an actor idle for long is let go once it has caught up)
            self._last_active = asyncio.get_running_loop().time() - idle_for
            self._touch(active=False)
            while True:
                # Whatever is waiting is taken at once (at most a queue's worth), so its
                # entries are journaled together; the result is the same as one at a time.
                items = [await self.mailbox.get()]
                while len(items) < self.limits.max_queue and not self.mailbox.empty():
                    items.append(self.mailbox.get_nowait())
                batch = [item for item in items if isinstance(item, tuple)]
                if not batch and CONTINUE not in items:
                    if self._idle_due():
                        log.info("conversation %s/%s is idle", p, c)
                        return
                    continue
                journaled = self.last_seq
                await self._process([signal for signal, _ in batch])
                if batch:
                    self.input_seq = max(self.input_seq, *(seq for _, seq in batch))
                # input applied before (read again at load) changes nothing: no activity
                self._touch(active=self.last_seq != journaled or not self.quiescent())
        finally:
            await self.close()

    # -- idleness ----------------------------------------------------------------

    def quiescent(self) -> bool:
        """Nothing to do: no directive running, no LLM call or tool call outstanding, nothing queued.

        (A tool call waiting for an approval is a running directive.)
        """
        state = self.state
        return (
            state is not None
            and not self.tasks
            and state.status in (Status.IDLE, Status.CANCELLED)
            and state.pending_llm is None
            and not state.pending_tool_calls
            and not state.event_queue
        )

    def _touch(self, *, active: bool = True) -> None:
        """Something happened (``active``: the idle clock starts again); the idle check is
        armed for the end of the timeout, only while quiescent."""
        if self._closed:
            return
        loop = asyncio.get_running_loop()
        if active:
            self._last_active = loop.time()
        if self._idle_timer is not None:
            self._idle_timer.cancel()
            self._idle_timer = None
        if self.quiescent():
            remaining = max(0.0, self._last_active + self.rt.settings.idle_timeout_s - loop.time())
            self._idle_timer = loop.call_later(remaining, self.mailbox.put_nowait, None)

    def _idle_due(self) -> bool:
        if not self.quiescent() or not self.mailbox.empty():
            return False
        loop = asyncio.get_running_loop()
        remaining = self._last_active + self.rt.settings.idle_timeout_s - loop.time()
        if remaining > 0:
            if self._idle_timer is not None:
                self._idle_timer.cancel()
            self._idle_timer = loop.call_later(remaining, self.mailbox.put_nowait, None)
            return False
        return True

    def cancel_tool_calls(self) -> None:
        """Ask the tool runner to cancel every tool call outstanding (a stop whose cancel could not
        go through the journal in time); the tasks finish even when the actor closes."""
        if self.state is None:
            return
        for call in self.state.pending_tool_calls:
            self._spawn(
                f"{_CANCEL_PREFIX}{call.request_id}",
                self.rt.tools.cancel(self.project_id, call.request_id, self.conversation_id),
            )

    async def close(self) -> None:
        self._closed = True
        self.traces.close()
        if self._idle_timer is not None:
            self._idle_timer.cancel()
            self._idle_timer = None
        for key, task in list(self.tasks.items()):
            # a cancel sent to the tool runner is let finish: a stop's cancel is applied just
            # before the stop lets the actor go, and its tool processes must still end
            if not key.startswith(_CANCEL_PREFIX):
                task.cancel()
        self.tasks.clear()
        if self._asks is not None:
            asks, self._asks = self._asks, None
            with contextlib.suppress(Exception):  # the connection may be closing
                await asks.unsubscribe()
        self.input.close()

    # -- input -------------------------------------------------------------------

    def _take_input(self, signal: Signal, seq: int, env: Envelope | None) -> None:
        """Input ``seq`` of the conversation's input stream, as ``signal`` (each one once, in order)."""
        self.traces.begin(signal, env)
        self.mailbox.put_nowait((signal, seq))

    async def _on_approval_requested(self, msg: Msg) -> None:
        """A question of the tool runner (published on the output already): journal it, once."""
        try:
            env = decode(msg.data, msg.headers)
            asked = ApprovalRequested.model_validate(env.data)
        except (JidoError, ValueError) as exc:
            log.debug("unreadable approval request: %s", exc)
            return
        await self.mailbox.put(
            (
                Signal.of(
                    asked,
                    id=f"{asked.request_id}:approval.requested",  # the same question asked again is one entry
                    source=APPROVAL_SOURCE,
                    correlation_id=env.correlation_id or asked.request_id,
                    causation_id=env.id,
                    time=env.time or now_iso(),
                ),
                0,
            )
        )

    async def deliver(self, signal: Signal) -> None:
        """Hand an internal signal (a directive's result) to the actor."""
        await self.mailbox.put((signal, 0))

    # -- the loop ----------------------------------------------------------------

    async def _process(self, signals: list[Signal]) -> None:
        """Ingest ``signals`` (at a full queue the reducer drops the new one, naming it in a
        ``conversation.queue.overflow`` entry), then one drain step: at most ``max_drain_steps``
        queued signals are applied; the rest wait for the next step (``continue_drain``), taken
        after whatever else reached the mailbox, and after other conversations had their turn."""
        assert self.state is not None
        out: list[Intent] = []
        for signal in signals:
            self.state, intents = ingest(self.state, signal)
            out.extend(intents)
        self.state, intents = drain(self.state)
        out.extend(intents)
        await self._execute(tuple(out))
        self.traces.observe((), self.state.queue_size)

    async def _execute(self, intents: tuple[Intent, ...]) -> None:
        """Carry out intents in order; consecutive entries are journaled together, and
        always before any directive that follows them.

        (A model call started alongside the journal write gains nothing: litellm
        spends milliseconds of CPU before its first await, which held back the
        journal write on the same loop; measured with bench/turn.py.)"""
        entries: list[Signal] = []
        for intent in intents:
            if isinstance(intent, Emit):
                entries.append(intent.entry)
                continue
            if entries:
                await self._emit(entries)
                entries = []
            self._direct(intent)
        if entries:
            await self._emit(entries)

    def _direct(self, intent: Intent) -> None:
        """Start (or cancel) the directive ``intent`` asks for; its result comes as a signal."""
        if isinstance(intent, RunLlm):
            self._spawn(intent.request_id, self._run_llm(intent))
        elif isinstance(intent, RunToolIntent) and intent.name == TASK_TOOL and self.subagents_enabled:
            self._spawn(intent.request_id, self._run_task(intent))
        elif isinstance(intent, RunToolIntent):
            self._spawn(intent.request_id, self._run_tool(intent))
        elif isinstance(intent, RunCompaction):
            self._spawn(intent.request_id, self._run_compaction(intent))
        elif isinstance(intent, CancelLlm):
            self._cancel(intent.request_id)
        elif isinstance(intent, CancelPendingTools):
            for request_id in intent.request_ids:
                self._cancel(request_id)
                self._spawn(
                    f"{_CANCEL_PREFIX}{request_id}",
                    self.rt.tools.cancel(self.project_id, request_id, self.conversation_id),
                )
        elif isinstance(intent, CancelPendingSubagents):
            for child in intent.subagent_ids:
                self._spawn(
                    f"{_CANCEL_PREFIX}subagent:{child}",
                    self.subagents.cancel_child(self.project_id, child, "the parent was cancelled"),
                )
        elif isinstance(intent, ContinueDrain):
            self.mailbox.put_nowait(CONTINUE)

    async def _emit(self, entries: list[Signal]) -> None:
        """Journal one step's ``entries`` (one message: :mod:`.journal`), then send them out."""
        p, c = self.project_id, self.conversation_id
        with self.traces.journal_write(entries):
            try:
                self.last_seq = await self.rt.journal.append_many(p, c, entries, expected_last=self.last_seq)
            except StorageFull as exc:  # nothing of the step is stored: its followers hear why
                await tell_storage_full(self.rt.bus, p, c, self.state, exc)
                raise
        await publish_step(self.rt.bus, p, c, entries)
        self.traces.observe(entries)

    def _spawn(self, key: str, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.create_task(coro, name=f"conv-{self.conversation_id}-{key}")
        self.tasks[key] = task
        task.add_done_callback(lambda t: self._done(key, t))

    def _done(self, key: str, task: asyncio.Task[None]) -> None:
        if self.tasks.get(key) is task:
            del self.tasks[key]
        if not task.cancelled() and task.exception() is not None:
            log.error("directive %s failed", key, exc_info=task.exception())
        self._touch()

    def _cancel(self, key: str) -> None:
        task = self.tasks.pop(key, None)
        if task is not None:
            task.cancel()

    # -- directives ----------------------------------------------------------------

    async def _tool_specs(self, intent: RunLlm) -> list[LlmToolSpec]:
        try:
            return await self.rt.tool_specs(self.project_id)
        except JidoError as exc:
            await self.deliver(
                Signal.of(
                    ConversationError(
                        error_type="tools_unavailable",
                        message=f"no tool list for the model, calling it without tools: {exc.message}",
                        details={"cause": exc.type},
                    ),
                    id=f"{intent.request_id}:no_tools",
                    source=LLM_SOURCE,
                    correlation_id=intent.correlation_id,
                    causation_id=intent.request_id,
                    time=now_iso(),
                )
            )
            return []

    def _offered(self, tools: list[LlmToolSpec]) -> list[str]:
        """The names of ``tools`` the model is shown (the conversation's ``tools`` exposure applied)."""
        try:
            exposure = ToolExposure.model_validate(self.record.settings.get("tools") or {})
        except ValueError:
            exposure = ToolExposure()
        return [t.name for t in tools if exposure.shown(t.name)]

    async def _run_llm(self, intent: RunLlm) -> None:
        with self.traces.within(intent.correlation_id):
            await self._llm_call(intent)

    async def _llm_call(self, intent: RunLlm) -> None:
        p, c = self.project_id, self.conversation_id
        # its settings as they are now: a tool exposure changed since the conversation was loaded
        # (configure_tools) counts from the next model call on, whichever replica took the change
        current = await self.rt.current_record(p, c)
        if current is not None and current.status == "active":
            self.record = current
        tools = await self._tool_specs(intent)
        if self.subagents_enabled and all(t.name != TASK_TOOL for t in tools):
            tools = await self._with_task_tool(tools)
        messages = list(intent.messages)
        system = self.record.settings.get("system_prompt")
        if isinstance(system, str) and system:
            messages.insert(0, {"role": "system", "content": system})
        request = LlmRequest(
            project_id=p,
            conversation_id=c,
            correlation_id=intent.correlation_id,
            request_id=intent.request_id,
            messages=messages,
            tools=tools,
            settings={k: v for k, v in self.record.settings.items() if k != "system_prompt"},
        )

        async def on_delta(text: str) -> None:
            await self.rt.bus.emit(
                AssistantDelta(text=text, request_id=intent.request_id),
                project_id=p,
                conversation_id=c,
                correlation_id=intent.correlation_id,
                causation_id=intent.request_id,
            )

        try:
            with self.traces.llm_call(request) as call:
                try:
                    result = await self.rt.llm.complete(request, on_delta)
                except JidoError as exc:
                    call.failed(exc.type, exc.message)
                    raise
                except Exception as exc:
                    call.failed("internal", f"{type(exc).__name__}: {exc}")
                    raise
                call.completed(result)
            completed = LlmCompleted(
                request_id=intent.request_id,
                content=result.content,
                tool_calls=[call.model_dump(mode="json") for call in result.tool_calls],
                usage=result.usage.model_dump(mode="json"),
                model=result.model,
                finish_reason=result.finish_reason,
                offered_tools=self._offered(tools),
                context_window=await self._context_window(result.model),
            )
            signal = result_signal(completed, intent.request_id, intent.correlation_id, LLM_SOURCE)
        except JidoError as exc:
            signal = self._failed_llm(intent, exc.type, exc.message, exc.retryable)
        except Exception as exc:  # the port broke its contract: still an answer, never a hang
            log.exception("LLM port raised")
            signal = self._failed_llm(intent, "internal", f"{type(exc).__name__}: {exc}", False)
        await self.deliver(signal)

    async def _context_window(self, model: str) -> int:
        """The model's window: the conversation's ``context_window`` setting, else the port's (0: unknown)."""
        configured = self.record.settings.get("context_window")
        if isinstance(configured, int) and configured > 0:
            return configured
        try:
            return await window_of(self.rt.llm, model)
        except Exception:  # a window we cannot learn: no threshold compaction
            return 0

    async def _run_compaction(self, intent: RunCompaction) -> None:
        outcome = await compact(
            self.rt.llm,
            intent,
            project_id=self.project_id,
            conversation_id=self.conversation_id,
            settings=self.record.settings,
        )
        await self.deliver(result_signal(outcome, intent.request_id, intent.correlation_id, LLM_SOURCE))

    def _failed_llm(self, intent: RunLlm, error_type: str, message: str, retryable: bool) -> Signal:
        failed = LlmFailed(
            request_id=intent.request_id, error_type=error_type, message=message, retryable=retryable
        )
        return result_signal(failed, intent.request_id, intent.correlation_id, LLM_SOURCE)

    async def _run_tool(self, intent: RunToolIntent) -> None:
        with self.traces.tool_call(
            intent.correlation_id, intent.name, intent.call_id, intent.request_id
        ) as sp:
            tools, state = self.rt.tools, self.state  # the state names the call's turn
            outcome = await call_tool(tools, self.project_id, self.conversation_id, intent, state)
            if sp is not None:
                sp.set_attribute(
                    "jido.outcome", "completed" if isinstance(outcome, ToolCallCompleted) else "failed"
                )
                if isinstance(outcome, ToolCallFailed):
                    from jidocode.shared.telemetry.spans import record_error

                    record_error(sp, outcome.message, outcome.error_type)
        await self.deliver(result_signal(outcome, intent.request_id, intent.correlation_id, TOOLS_SOURCE))

    # -- sub-agents (the ``task`` tool: subagents/runner.py) ---------------------------

    @property
    def subagents_enabled(self) -> bool:
        return self.rt.settings.subagents.enabled

    @property
    def subagents(self) -> SubagentRunner:
        if self._subagents is None:
            self._subagents = SubagentRunner(self.rt.bus, self.rt.settings.subagents)
        return self._subagents

    async def _with_task_tool(self, tools: list[LlmToolSpec]) -> list[LlmToolSpec]:
        """``tools`` and the ``task`` tool (without it when its templates cannot be read in time:
        the lookup binds a KV bucket and reads files, which a loaded JetStream can hold up)."""
        try:
            spec = await asyncio.wait_for(self.subagents.spec(self.project_id), TASK_SPEC_WAIT_S)
        except Exception as exc:  # the model call goes on without sub-agents, never hangs
            log.warning("no task tool for %s: %r", self.conversation_id, exc)
            return tools
        return [*tools, spec]

    async def _run_task(self, intent: RunToolIntent) -> None:
        """A ``task`` call: a child conversation runs it; its answer is this call's result."""
        p, c = self.project_id, self.conversation_id
        outcome: ToolCallCompleted | ToolCallFailed
        try:
            current = await self.rt.current_record(p, c)
            if current is not None and current.status == "active":
                self.record = current
            try:
                specs = await self.rt.tool_specs(p)
            except JidoError:
                specs = []
            parent = ParentView(
                project_id=p,
                conversation_id=c,
                settings=self.record.settings,
                offered=self._offered(await self._with_task_tool(specs)),
                deliver=self.deliver,
                spawn=self._spawn,
                closing=lambda: self._closed,
            )
            outcome = await self.subagents.run(parent, intent)
        except Exception as raised:  # the call must still end: never wait forever
            exc = (
                raised
                if isinstance(raised, JidoError)
                else JidoError(
                    f"the sub-agent could not run: {raised}", error_type="internal", retryable=True
                )
            )
            if not isinstance(raised, JidoError):
                log.exception("task call %s failed", intent.request_id)
            outcome = tool_failure(intent, exc)
        await self.deliver(result_signal(outcome, intent.request_id, intent.correlation_id, TOOLS_SOURCE))

    # -- reads -------------------------------------------------------------------------

    def projection(self, name: str) -> Any:
        assert self.state is not None
        version = (self.state.version, self.state.queue_size)
        cached = self._cache.get(name)
        if cached is not None and cached[0] == version:
            return cached[1]
        value = project(self.state, name)
        self._cache[name] = (version, value)
        return value
