"""Running one ``task`` call: a child conversation started, followed, and its answer returned.

Where it runs (decision 0250): in the parent conversation's actor, as a directive
task like a model call — never in the tool runner. The parent's loop goes on
(the task only awaits bus messages), no tool-runner slot is held for the
minutes a child may take, and the wait is bounded by ``timeout_s``. The child is
an ordinary conversation started through the conversation service's own
endpoints, so whichever replica takes it runs it, with its own journal.

One call, top to bottom (:meth:`SubagentRunner.run`):

1. refuse at once what may not start: malformed arguments, the depth limit, the
   per-conversation limit, an unknown agent type, the per-project limit (a slot
   of :mod:`.slots`) — each a tool error naming the limit;
2. start the child (its id derives from the call's request id, so a call run
   again after a crash finds the same child) with the template's prompt, its
   tools (the template's list within the parent's) and a reference to the parent;
3. tell the parent (``conversation.subagent.started``, journaled there);
4. follow the child's output, send it the prompt (an event id of its own: sent
   twice, applied once), and, when the child was there already (the call runs
   again), read its timeline once: it may have finished while nobody followed it;
5. when it ends: its totals go into the ledger under the parent, the parent is
   told (``conversation.subagent.completed``) and gets the answer as the tool result.

Cancelled (the parent was cancelled): the child is cancelled too and its slot released, by
tasks that outlive this one. Cut short because the parent's actor is closing (a shutdown, a
hand-over, a lost lease): the child runs on, keeps its slot, and the replica that takes the
parent over runs the call again and finds it (decision 0254).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Coroutine, Mapping, Sequence
from pathlib import Path
from typing import Any, Final

from jidocode.services.conversation.core import RunToolIntent, Signal
from jidocode.services.conversation.ports import LlmToolSpec
from jidocode.shared import subjects
from jidocode.shared.bus import Bus
from jidocode.shared.clients import ConversationsClient
from jidocode.shared.envelope import Envelope, now_iso
from jidocode.shared.errors import JidoError
from jidocode.shared.events.conversation import (
    Cancel,
    SubagentCompleted,
    SubagentStarted,
    ToolCallCompleted,
    ToolCallFailed,
    UserMessage,
)
from jidocode.shared.ledger import LedgerReader, subagent_key
from jidocode.shared.registry import ProjectDirectory
from jidocode.shared.settings import global_home
from jidocode.shared.trust import is_trusted

from .core import (
    Outcome,
    Refusal,
    SubagentRef,
    SubagentSettings,
    TaskArgs,
    cap_result,
    check_start,
    child_conversation_id,
    child_settings,
    child_tools,
    depth_of,
    outcome_of,
    parse_task_args,
    project_quota_refusal,
    task_spec,
)
from .slots import SubagentSlots
from .templates import Templates, load_templates

__all__ = ["SUBAGENT_SOURCE", "ParentView", "SubagentRunner"]

log = logging.getLogger("jidocode.conversation.subagents")

#: ``source`` of the sub-agent entries journaled in the parent.
SUBAGENT_SOURCE: Final = "conversation/subagents"
#: How long the project's templates are reused before reading the folders again.
TEMPLATES_TTL_S: Final = 5.0
#: Bound of each request the runner makes to the conversation service.
REQUEST_TIMEOUT_S: Final = 30.0

Spawn = Callable[[str, Coroutine[Any, Any, None]], None]


def _tool_failed(intent: RunToolIntent, refusal: Refusal) -> ToolCallFailed:
    """The ``task`` call's tool error for ``refusal``."""
    return ToolCallFailed(
        request_id=intent.request_id,
        call_id=intent.call_id,
        name=intent.name,
        error_type=refusal.error_type,
        message=refusal.message,
        details=refusal.details,
    )


def _tool_result(
    intent: RunToolIntent, child: str, outcome: Outcome, max_chars: int
) -> ToolCallCompleted | ToolCallFailed:
    """The ``task`` call's result for the child's ``outcome``: its answer (cut to ``max_chars``),
    or a tool error naming the child and the cause."""
    if outcome.status == "completed":
        return ToolCallCompleted(
            request_id=intent.request_id,
            call_id=intent.call_id,
            name=intent.name,
            data=cap_result(outcome.result, max_chars),
        )
    return _tool_failed(
        intent,
        Refusal(
            error_type="subagent_cancelled" if outcome.status == "cancelled" else "subagent_failed",
            message=f"sub-agent {child}: {outcome.message}",
            details={"subagent_id": child, "cause": outcome.error_type},
        ),
    )


def _unknown_type_refusal(subagent_type: str, templates: Templates) -> Refusal:
    return Refusal(
        error_type="unknown_subagent_type",
        message=f"there is no sub-agent type {subagent_type!r}; the types are: {', '.join(templates.names())}",
        details={"subagent_type": subagent_type, "known": templates.names()},
    )


class ParentView:
    """What the runner needs of the parent conversation (its actor provides it)."""

    def __init__(
        self,
        *,
        project_id: str,
        conversation_id: str,
        settings: Mapping[str, Any],
        offered: Sequence[str],
        deliver: Callable[[Signal], Awaitable[None]],
        spawn: Spawn,
        closing: Callable[[], bool] = lambda: False,
    ) -> None:
        self.project_id = project_id
        self.conversation_id = conversation_id
        self.settings = settings
        self.offered = offered
        self.deliver = deliver
        self.spawn = spawn
        #: The actor is letting the parent go (shutdown, hand-over, lost lease): its calls are cut,
        #: not cancelled, and the replica that takes the parent over carries them on.
        self.closing = closing


class SubagentRunner:
    """Sub-agents of one parent conversation (one per actor)."""

    def __init__(self, bus: Bus, settings: SubagentSettings, *, home: Path | None = None) -> None:
        self.bus = bus
        self.settings = settings
        self.home = home
        self.slots = SubagentSlots(bus, limit=settings.max_per_project, ttl_s=settings.timeout_s + 60.0)
        #: Children running now, by the parent's request id.
        self.running: dict[str, str] = {}
        self._templates: dict[str, tuple[float, Templates]] = {}
        self._reading: dict[str, asyncio.Future[Templates]] = {}
        self._directory: ProjectDirectory | None = None

    # -- templates ---------------------------------------------------------------

    async def templates(self, project_id: str) -> Templates:
        """The project's templates, read again at most every :data:`TEMPLATES_TTL_S`, and by one
        reader at a time: every model call of every conversation of the project asks for them."""
        cached = self._templates.get(project_id)
        if cached is not None and time.monotonic() - cached[0] < TEMPLATES_TTL_S:
            return cached[1]
        reading = self._reading.get(project_id)
        if reading is None:
            reading = asyncio.ensure_future(self._read_templates(project_id))
            self._reading[project_id] = reading
            reading.add_done_callback(lambda _: self._reading.pop(project_id, None))
        return await asyncio.shield(reading)

    async def _read_templates(self, project_id: str) -> Templates:
        if self._directory is None:
            self._directory = await ProjectDirectory.open(self.bus)
        info = await self._directory.lookup(project_id)
        home = global_home(self.home)
        root = Path(info.root_path) if info is not None else None
        data_dir = info.data_dir if info is not None else ".jido"

        def _load() -> Templates:
            trusted = root is not None and is_trusted(root, home=home)
            return load_templates(root, home=home, trusted=trusted, data_dir=data_dir)

        found = await asyncio.to_thread(_load)
        for problem in found.problems:
            log.warning("sub-agent template %s: %s", problem.path, problem.problem)
        self._templates[project_id] = (time.monotonic(), found)
        return found

    async def spec(self, project_id: str) -> LlmToolSpec:
        return task_spec(await self.templates(project_id))

    # -- one call ----------------------------------------------------------------

    async def run(self, parent: ParentView, intent: RunToolIntent) -> ToolCallCompleted | ToolCallFailed:
        """The tool result of the ``task`` call ``intent`` (see the module docstring)."""
        rid = intent.request_id
        args = parse_task_args(intent.args, self.settings)
        if isinstance(args, Refusal):
            return _tool_failed(intent, args)
        depth = depth_of(parent.settings)
        running_here = len([r for r in self.running if r != rid])
        refusal = check_start(parent_depth=depth, running_here=running_here, settings=self.settings)
        if refusal is not None:
            return _tool_failed(intent, refusal)
        child = child_conversation_id(parent.conversation_id, rid)
        self.running[rid] = child  # counted before the first await: calls of one turn start together
        try:
            outcome = await self._run_in_slot(parent, intent, args, child, depth)
        finally:
            self.running.pop(rid, None)
        if isinstance(outcome, Refusal):
            return _tool_failed(intent, outcome)
        return _tool_result(intent, child, outcome, self.settings.max_result_chars)

    async def _run_in_slot(
        self, parent: ParentView, intent: RunToolIntent, args: TaskArgs, child: str, depth: int
    ) -> Outcome | Refusal:
        """Steps 2 to 5 for a call allowed to start: the child's template and project slot, its run,
        and the parent told of its end; a refusal when the type is unknown or the project is full."""
        p = parent.project_id
        templates = await self.templates(p)
        template = templates.get(args.subagent_type)
        if template is None:
            return _unknown_type_refusal(args.subagent_type, templates)
        slot = await self.slots.acquire(p, child)
        if slot is None:
            return project_quota_refusal(self.settings.max_per_project)
        outcome = await self._supervised_child(
            parent,
            intent,
            args,
            child,
            template.name,
            template_settings={
                "system_prompt": template.system_prompt,
                "tools": child_tools(template.tools, parent.offered),
                "model": template.model,
                "depth": depth + 1,
            },
        )
        await self._account(p, parent.conversation_id, child)
        await parent.deliver(
            self._signal(
                SubagentCompleted(
                    subagent_id=child,
                    status=outcome.status,
                    result=outcome.result if outcome.status == "completed" else outcome.message,
                ),
                f"{intent.request_id}:subagent.completed",
                intent,
            )
        )
        await self.slots.release(p, child, slot)
        return outcome

    async def _supervised_child(
        self,
        parent: ParentView,
        intent: RunToolIntent,
        args: TaskArgs,
        child: str,
        template_name: str,
        template_settings: dict[str, Any],
    ) -> Outcome:
        """The child's outcome, an error or a timeout as a failed one; a cancelled call cancels
        the child too (unless the parent's actor is closing: then the child runs on)."""
        p = parent.project_id
        try:
            return await self._run_child(parent, intent, args, child, template_name, template_settings)
        except asyncio.CancelledError:
            if not parent.closing():  # the call was cancelled: so is its child
                parent.spawn(
                    f"cancel:subagent:{child}",
                    self._cancel_and_release(p, child, "the parent was cancelled"),
                )
            raise
        except JidoError as exc:
            return Outcome(status="failed", error_type=exc.type, message=exc.message)
        except TimeoutError:
            parent.spawn(f"cancel:subagent:{child}", self.cancel_child(p, child, "timed out"))
            return Outcome(
                status="failed",
                error_type="subagent_timeout",
                message=f"the sub-agent did not finish within {self.settings.timeout_s:g} s and was cancelled",
            )

    async def _run_child(
        self,
        parent: ParentView,
        intent: RunToolIntent,
        args: TaskArgs,
        child: str,
        template_name: str,
        template_settings: dict[str, Any],
    ) -> Outcome:
        p, rid = parent.project_id, intent.request_id
        client = ConversationsClient(self.bus, p, timeout=REQUEST_TIMEOUT_S)
        ref = SubagentRef(
            parent_conversation_id=parent.conversation_id,
            request_id=rid,
            depth=int(template_settings["depth"]),
            template=template_name,
        )
        settings = child_settings(
            parent.settings,
            ref=ref,
            system_prompt=str(template_settings["system_prompt"]),
            tools=list(template_settings["tools"]),
            model=template_settings["model"],
        )
        info = await client.start(child, settings=settings)
        await parent.deliver(
            self._signal(
                SubagentStarted(
                    subagent_id=child, name=template_name, request_id=rid, description=args.description
                ),
                f"{rid}:subagent.started",
                intent,
            )
        )
        ended: asyncio.Future[Outcome] = asyncio.get_running_loop().create_future()

        async def on_output(env: Envelope) -> None:
            found = outcome_of(env.type, env.data)
            if found is not None and not ended.done():
                ended.set_result(found)

        sub = await self.bus.subscribe(subjects.conversation_out_filter(p, child), on_output)
        try:
            await self.bus.nc.flush()
            await client.send_event(
                child,
                UserMessage.TYPE,
                UserMessage(text=args.prompt).to_data(),
                event_id=f"{child}-task",
                correlation_id=intent.correlation_id,
            )
            if info.reopened:
                # the child was there: this call runs again (after a crash of the parent's
                # replica, or a hand-over), and the child may have finished meanwhile
                timeline = (await client.get_projection(child, "timeline")).value or []
                for entry in timeline:
                    found = outcome_of(str(entry.get("type")), entry.get("data") or {})
                    if found is not None and not ended.done():
                        ended.set_result(found)
                        break
            return await asyncio.wait_for(ended, self.settings.timeout_s)
        finally:
            with contextlib.suppress(Exception):  # the connection may be closing
                await sub.unsubscribe()

    def _signal(
        self, event: SubagentStarted | SubagentCompleted, signal_id: str, intent: RunToolIntent
    ) -> Signal:
        return Signal.of(
            event,
            id=signal_id,
            source=SUBAGENT_SOURCE,
            correlation_id=intent.correlation_id,
            causation_id=intent.request_id,
            time=now_iso(),
        )

    async def _account(self, project_id: str, parent_id: str, child: str) -> None:
        """The child's totals (with its own sub-agents') under the parent in the ledger."""
        try:
            reader = LedgerReader(self.bus)
            totals = await reader.with_subagents(project_id, child)
            kv = await self.bus.kv(subjects.BUCKET_LEDGER, history=1)
            await kv.put(subagent_key(project_id, parent_id, child), totals.model_dump_json().encode())
        except Exception as exc:  # the answer still goes back; the ledger is told on the next call
            log.warning("ledger of sub-agent %s under %s: %s", child, parent_id, exc)

    # -- cancel ------------------------------------------------------------------

    async def cancel_child(self, project_id: str, child: str, reason: str) -> None:
        """Cancel the child (its model call and tool calls end); sent twice, applied once."""
        try:
            await ConversationsClient(self.bus, project_id, timeout=REQUEST_TIMEOUT_S).send_event(
                child, Cancel.TYPE, Cancel(reason=reason).to_data(), event_id=f"{child}-cancel"
            )
        except JidoError as exc:
            log.warning("cancel of sub-agent %s: %s", child, exc.message)

    async def _cancel_and_release(self, project_id: str, child: str, reason: str) -> None:
        await self.cancel_child(project_id, child, reason)
        try:
            await self.slots.release(project_id, child)
        except Exception as exc:  # the slot expires with the bucket's TTL
            log.warning("release of sub-agent slot %s: %s", child, exc)
