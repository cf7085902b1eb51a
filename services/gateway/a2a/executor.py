"""The SDK's ``AgentExecutor`` over one project's conversations.

``execute`` turns an A2A message into the conversation's input and the
conversation's live output into A2A events (:class:`.view.TurnFollower` decides
which):

* a new task starts the conversation (its id is the task's), sends the text as a
  ``conversation.user.message`` (under the client's ``messageId`` where it is a plain
  token, so the task's history shows it) and follows the turn;
* a task in ``input-required`` reads the message as the answer to the oldest pending
  approval (:func:`.view.parse_decision`) and sends a ``conversation.approval.response``;
* assistant deltas stream as pieces of the ``answer`` artifact; the final answer
  replaces it whole and completes the task; an approval the tool runner asks for
  ends ``execute`` in ``input-required`` (the SDK calls it again with the answer);
  ``llm.failed``/``loop.stopped`` fail the task; ``conversation.cancel`` cancels it.

``cancel`` sends the conversation's ``cancel``. Nothing here outlives a request:
a later message may reach another gateway replica, which reads the task back from
the conversation's projections (:mod:`.tasks`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Final

from a2a.helpers.proto_helpers import get_data_parts, get_text_parts
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.tasks.task_updater import TaskUpdater
from a2a.types.a2a_pb2 import (
    Artifact,
    Message,
    Part,
    Task,
    TaskArtifactUpdateEvent,
    TaskState,
    TaskStatus,
    TaskStatusUpdateEvent,
)
from a2a.utils.errors import InvalidParamsError, UnsupportedOperationError
from nats.aio.subscription import Subscription

from jidocode.shared import subjects
from jidocode.shared.bus import Bus
from jidocode.shared.clients import ConversationsClient
from jidocode.shared.envelope import Envelope, new_id
from jidocode.shared.errors import InvalidInput, JidoError, PayloadTooLarge
from jidocode.shared.events.conversation import ApprovalResponse, Cancel, EventIngested, UserMessage

from .tasks import ANSWER_ARTIFACT, STATES, agent_message, read_view
from .view import (
    AnswerError,
    Asked,
    Delta,
    Ended,
    PendingApproval,
    TaskView,
    TurnFollower,
    Update,
    parse_content,
    parse_decision,
)

__all__ = ["JOURNAL_WAIT_S", "ConversationExecutor"]

log = logging.getLogger("jidocode.gateway.a2a")

#: How long an approval question waits to be journaled before the task reports
#: ``input-required`` anyway (so that a replica reading the task sees the question).
JOURNAL_WAIT_S: Final = 30.0

_FINISHED: Final = frozenset({"completed", "failed", "canceled"})
#: A client's ``messageId`` that can be the conversation's event id as it is (the task's
#: history then shows it); any other gets a new id.
_PLAIN_ID: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:@-]{0,127}")


def _event_id(message: Message) -> str:
    """The event id of the user message: the client's ``messageId`` where it is plain."""
    return message.message_id if _PLAIN_ID.fullmatch(message.message_id) else new_id()


class ConversationExecutor(AgentExecutor):
    """Runs A2A requests of one project as turns of its conversations."""

    def __init__(self, bus: Bus, conversations: ConversationsClient) -> None:
        self.bus = bus
        self.conversations = conversations

    @property
    def project_id(self) -> str:
        return self.conversations.project_id

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        task_id = context.task_id
        if not task_id or context.message is None:
            raise ValueError("an A2A request without a task id or a message")
        updater = TaskUpdater(event_queue, task_id, task_id)
        message: Message = context.message
        if not "".join(get_text_parts(message.parts)).strip() and not get_data_parts(message.parts):
            raise InvalidParamsError(message="the message has no text and no data part")
        if context.current_task is None:
            await self.conversations.start(task_id)
            await event_queue.enqueue_event(
                Task(
                    id=task_id,
                    context_id=task_id,
                    status=TaskStatus(state=TaskState.TASK_STATE_SUBMITTED),
                    history=[message],
                )
            )
        inbox: asyncio.Queue[Envelope] = asyncio.Queue()

        async def on_output(env: Envelope) -> None:
            inbox.put_nowait(env)

        sub = await self.bus.subscribe(subjects.conversation_out_filter(self.project_id, task_id), on_output)
        await self.bus.nc.flush()  # listening before anything is sent, and before the task is read
        try:
            view = TaskView()
            if context.current_task is not None:
                view = await read_view(self.conversations, task_id) or view
                if view.state in _FINISHED:  # finished on another replica while parked here
                    raise UnsupportedOperationError(
                        message=f"task {task_id} is {view.state}: a new question is a new task"
                    )
            follower = await self._send(task_id, message, view, updater)
            if follower is not None:
                await self._follow(task_id, inbox, follower, updater)
        finally:
            await sub.unsubscribe()

    async def _send(
        self, task_id: str, message: Message, view: TaskView, updater: TaskUpdater
    ) -> TurnFollower | None:
        """Send the message as what the task waits for; ``None`` when nothing was sent."""
        texts = get_text_parts(message.parts)
        datas = get_data_parts(message.parts)
        if view.state == "input-required":
            try:
                approval, decision = parse_decision(texts, datas, view.pending)
                content = parse_content(datas, approval, decision)
            except AnswerError as exc:
                question = view.pending[0].question() if view.pending else ""
                await updater.requires_input(
                    agent_message(task_id, f"{exc}. {question}".strip(), mid=new_id())
                )
                return None
            answer = ApprovalResponse(request_id=approval.request_id, decision=decision, content=content)
            await self.conversations.send_event(
                task_id, answer.type, answer.to_data(), correlation_id=approval.correlation_id
            )
            waiting = [p for p in view.pending if p.request_id != approval.request_id]
            if waiting:  # several calls of the turn asked at once: the next question
                await updater.requires_input(
                    agent_message(task_id, waiting[0].question(), approval=waiting[0], mid=new_id())
                )
                return None
            await updater.start_work()
            return TurnFollower(None)
        text = "\n".join(texts).strip() or "\n".join(json.dumps(d) for d in datas)
        message_id = _event_id(message)
        user = UserMessage(text=text)
        try:
            await self.conversations.send_event(
                task_id, user.type, user.to_data(), event_id=message_id, correlation_id=message_id
            )
        except (InvalidInput, PayloadTooLarge) as exc:
            if view.state == "submitted":  # the task's first message: no task came of it
                with contextlib.suppress(JidoError):
                    await self.conversations.delete(task_id)
            raise InvalidParamsError(message=exc.message) from None
        await updater.start_work()
        return TurnFollower(message_id)

    async def _follow(
        self, task_id: str, inbox: asyncio.Queue[Envelope], follower: TurnFollower, updater: TaskUpdater
    ) -> None:
        async for update, events in _turn(task_id, inbox, follower):
            if isinstance(update, Asked):
                await self._wait_journaled(task_id, update.approval)
            for event in events:
                await updater.event_queue.enqueue_event(event)

    async def _wait_journaled(self, task_id: str, approval: PendingApproval) -> None:
        """Wait until the conversation journaled the question, so ``GetTask`` shows it.

        The tool runner publishes the question before the conversation journals it;
        an answer read back from the task must find it there. Listening first, then
        reading the projection, leaves no gap between the two.
        """
        journaled = asyncio.Event()
        wanted = f"{approval.request_id}:approval.requested"

        async def on_ingested(env: Envelope) -> None:
            data = env.data if isinstance(env.data, dict) else {}
            if data.get("conversation_id") == task_id and data.get("event_id") == wanted:
                journaled.set()

        sub: Subscription = await self.bus.subscribe(subjects.signal(EventIngested.TYPE), on_ingested)
        try:
            await self.bus.nc.flush()
            view = await read_view(self.conversations, task_id)
            if view is not None and any(p.request_id == approval.request_id for p in view.pending):
                return
            try:
                await asyncio.wait_for(journaled.wait(), JOURNAL_WAIT_S)
            except TimeoutError:
                log.warning(
                    "approval %s of %s not journaled in %g s", approval.request_id, task_id, JOURNAL_WAIT_S
                )
        finally:
            await sub.unsubscribe()

    async def tail(self, task_id: str) -> AsyncIterator[TaskStatusUpdateEvent | TaskArtifactUpdateEvent]:
        """The rest of a running turn, for a subscriber on a replica that does not run it.

        Listening first, then reading the task: a turn that is not ``working`` then has nothing
        more to show (its state is in the task the subscriber got).
        """
        inbox: asyncio.Queue[Envelope] = asyncio.Queue()

        async def on_output(env: Envelope) -> None:
            inbox.put_nowait(env)

        sub = await self.bus.subscribe(subjects.conversation_out_filter(self.project_id, task_id), on_output)
        try:
            await self.bus.nc.flush()
            view = await read_view(self.conversations, task_id)
            if view is None or view.state != "working":
                return
            async for _, events in _turn(task_id, inbox, TurnFollower(None)):
                for event in events:
                    yield event
        finally:
            await sub.unsubscribe()

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        task_id = context.task_id
        if not task_id:
            raise ValueError("a cancel without a task id")
        cancel = Cancel(reason="cancelled by the A2A client")
        await self.conversations.send_event(task_id, cancel.type, cancel.to_data())
        updater = TaskUpdater(event_queue, task_id, context.context_id or task_id)
        await updater.cancel(agent_message(task_id, "cancelled by the A2A client", mid=new_id()))


def _piece(task_id: str, text: str, *, append: bool, last: bool) -> TaskArtifactUpdateEvent:
    return TaskArtifactUpdateEvent(
        task_id=task_id,
        context_id=task_id,
        artifact=Artifact(artifact_id=ANSWER_ARTIFACT, name="answer", parts=[Part(text=text)]),
        append=append,
        last_chunk=last,
    )


def _status(task_id: str, state: TaskState, message: Message | None = None) -> TaskStatusUpdateEvent:
    status = TaskStatus(state=state)
    if message is not None:
        status.message.CopyFrom(message)
    status.timestamp.FromDatetime(datetime.now(UTC))
    return TaskStatusUpdateEvent(task_id=task_id, context_id=task_id, status=status)


Event = TaskStatusUpdateEvent | TaskArtifactUpdateEvent


async def _turn(
    task_id: str, inbox: asyncio.Queue[Envelope], follower: TurnFollower
) -> AsyncIterator[tuple[Update, list[Event]]]:
    """The A2A events of a turn's output, until it asks (``input-required``) or ends: answer
    pieces of the ``answer`` artifact, then the whole answer and the final status."""
    streamed = False
    while True:
        env = await inbox.get()
        data = env.data if isinstance(env.data, dict) else {}
        for update in follower.feed(env.type, data, event_id=env.id):
            if isinstance(update, Delta):
                yield update, [_piece(task_id, update.text, append=streamed, last=False)]
                streamed = True
            elif isinstance(update, Asked):
                question = agent_message(
                    task_id, update.approval.question(), approval=update.approval, mid=new_id()
                )
                yield update, [_status(task_id, TaskState.TASK_STATE_INPUT_REQUIRED, question)]
                return
            elif isinstance(update, Ended):
                if update.state == "completed":
                    events: list[Event] = [
                        _piece(task_id, update.text, append=False, last=True),
                        _status(task_id, TaskState.TASK_STATE_COMPLETED),
                    ]
                else:
                    reason = update.text or ("the turn failed" if update.state == "failed" else "cancelled")
                    events = [
                        _status(task_id, STATES[update.state], agent_message(task_id, reason, mid=new_id()))
                    ]
                yield update, events
                return
