"""A2A tasks built from conversations: :class:`ConversationTaskStore` and the proto mapping.

The store keeps nothing: ``get`` folds the conversation's ``timeline`` projection
(:func:`.view.fold`) into an A2A ``Task``, so every gateway replica answers the same.
``list`` lists the project's conversations as tasks (:mod:`.listing`).
The SDK's writes (each event the executor publishes) are already on the bus as the
conversation's own journal, so ``save`` has one job only: a write that moves a live task
to ``canceled`` (the SDK's cancel of a task running on another replica) becomes the
conversation's ``cancel``.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Final

from a2a.server.context import ServerCallContext
from a2a.server.tasks.task_store import TaskStore
from a2a.types.a2a_pb2 import (
    Artifact,
    ListTasksRequest,
    ListTasksResponse,
    Message,
    Part,
    Role,
    Task,
    TaskState,
    TaskStatus,
)
from a2a.utils.errors import UnsupportedOperationError
from google.protobuf.json_format import ParseDict
from google.protobuf.struct_pb2 import Value

from jidocode.shared import subjects
from jidocode.shared.clients import ConversationsClient
from jidocode.shared.errors import NotFound
from jidocode.shared.events.conversation import Cancel, ConversationSummary

from .listing import READS, SCAN_LIMIT, candidates, check_token, moment, page
from .view import PendingApproval, State, TaskView, fold

__all__ = [
    "ANSWER_ARTIFACT",
    "STATES",
    "ConversationTaskStore",
    "agent_message",
    "read_view",
    "to_task",
]

log = logging.getLogger("jidocode.gateway.a2a")

#: The id of the artifact holding a turn's answer (streamed in pieces, then whole).
ANSWER_ARTIFACT: Final = "answer"

STATES: Final[dict[State, TaskState]] = {
    "submitted": TaskState.TASK_STATE_SUBMITTED,
    "working": TaskState.TASK_STATE_WORKING,
    "input-required": TaskState.TASK_STATE_INPUT_REQUIRED,
    "completed": TaskState.TASK_STATE_COMPLETED,
    "failed": TaskState.TASK_STATE_FAILED,
    "canceled": TaskState.TASK_STATE_CANCELED,
}

_LIVE: Final = frozenset({"submitted", "working", "input-required"})


def _value(data: Any) -> Value:
    value = Value()
    ParseDict(data, value)
    return value


def agent_message(
    task_id: str, text: str, *, approval: PendingApproval | None = None, mid: str = ""
) -> Message:
    """An agent message of the task; an approval question carries a data part too."""
    parts = [Part(text=text)]
    if approval is not None:
        parts.append(
            Part(
                data=_value(
                    {
                        "request_id": approval.request_id,
                        "tool": approval.tool,
                        "args": approval.args,
                        "reason": approval.reason,
                        "answers": ["allow", "allow always", "deny"],
                        **({"form": approval.form} if approval.form is not None else {}),
                    }
                ),
                media_type="application/json",
            )
        )
    return Message(
        message_id=mid or f"{task_id}-status",
        context_id=task_id,
        task_id=task_id,
        role=Role.ROLE_AGENT,
        parts=parts,
    )


def to_task(task_id: str, view: TaskView) -> Task:
    """The A2A task of a conversation seen through :class:`TaskView`."""
    status = TaskStatus(state=STATES[view.state])
    if view.state == "input-required" and view.pending:
        status.message.CopyFrom(agent_message(task_id, view.pending[0].question(), approval=view.pending[0]))
    elif view.state in ("failed", "canceled") and view.reason:
        status.message.CopyFrom(agent_message(task_id, view.reason))
    history = [
        Message(
            message_id=u.id,
            context_id=task_id,
            task_id=task_id,
            role=Role.ROLE_USER if u.role == "user" else Role.ROLE_AGENT,
            parts=[Part(text=u.text)],
        )
        for u in view.history
    ]
    artifacts = []
    if view.answer is not None:
        artifacts.append(Artifact(artifact_id=ANSWER_ARTIFACT, name="answer", parts=[Part(text=view.answer)]))
    return Task(id=task_id, context_id=task_id, status=status, history=history, artifacts=artifacts)


async def read_view(conversations: ConversationsClient, conversation_id: str) -> TaskView | None:
    """The view of the conversation, ``None`` when there is no such conversation."""
    try:
        subjects.validate_token(conversation_id, "task id")
    except ValueError:
        return None
    try:
        projection = await conversations.get_projection(conversation_id, "timeline")
    except NotFound:
        return None
    value = projection.value if isinstance(projection.value, list) else []
    return fold(entry for entry in value if isinstance(entry, dict))


class ConversationTaskStore(TaskStore):
    """The SDK's task store over one project's conversations (no state of its own)."""

    def __init__(self, conversations: ConversationsClient) -> None:
        self.conversations = conversations

    async def save(self, task: Task, context: ServerCallContext) -> None:
        if task.status.state != TaskState.TASK_STATE_CANCELED:
            return  # the conversation's journal already holds what the task shows
        view = await read_view(self.conversations, task.id)
        if view is None or view.state not in _LIVE:
            return
        log.info("a2a: cancelling conversation %s (task cancelled)", task.id)
        cancel = Cancel(reason="cancelled by the A2A client")
        await self.conversations.send_event(task.id, cancel.type, cancel.to_data())

    async def get(self, task_id: str, context: ServerCallContext) -> Task | None:
        """The task, ``None`` for no conversation or one that never had a message (a task
        is born with its first message: the executor has just started the conversation)."""
        view = await read_view(self.conversations, task_id)
        if view is None or (view.state == "submitted" and not view.history):
            return None
        return to_task(task_id, view)

    async def list(self, params: ListTasksRequest, context: ServerCallContext) -> ListTasksResponse:
        """The project's tasks, running or ended, filtered and paged (:mod:`.listing`)."""
        check_token(params)  # a bad token is refused before anything is read
        listed = await self.conversations.list(limit=SCAN_LIMIT, conversation_id=params.context_id or None)
        reads = asyncio.Semaphore(READS)
        found = await asyncio.gather(
            *(self._listed(summary, reads) for summary in candidates(listed.conversations, params))
        )
        return page(
            [t for t in found if t is not None and (not params.status or t.status.state == params.status)],
            params,
        )

    async def _listed(self, summary: ConversationSummary, reads: asyncio.Semaphore) -> Task | None:
        """The task of a listed conversation, stamped with its last activity; ``None`` for one
        that never had a user message (no task was born of it) or is gone."""
        async with reads:
            view = await read_view(self.conversations, summary.conversation_id)
        if view is None or not any(u.role == "user" for u in view.history):
            return None
        task = to_task(summary.conversation_id, view)
        when = moment(summary)
        if when is not None:
            task.status.timestamp.FromDatetime(when)
        return task

    async def delete(self, task_id: str, context: ServerCallContext) -> None:
        raise UnsupportedOperationError(
            message="tasks are conversations: delete them with the conversation API"
        )
