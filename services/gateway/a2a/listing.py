"""``ListTasks`` over a project's conversations (A2A v1.0 §3.1.4): the pure part.

Every conversation of the project that has had a user message is a task, running or
ended (stopped conversations included; deleted ones are gone). The list is read from
the conversation service's own list, newest activity first, and each candidate's task
from its ``timeline`` (as ``GetTask`` reads it), so any replica lists the same:

* ``contextId`` keeps the task of that id (a task is its own context, decision 0225);
* ``status`` keeps the tasks in that state, ``statusTimestampAfter`` those whose last
  activity is at or after that time (the task's ``status.timestamp``);
* pages are cut (``pageSize``, default 50) in the SDK's order (timestamp, then id, descending) with the SDK's
  cursor tokens: a token names the last task of its page, so it stays valid while
  tasks come and go; a token this server did not make is ``InvalidParams``; the answer's
  ``pageSize`` is the number of tasks on the page (what the TCK checks; the SDK's own
  stores echo the size asked for);
* a ``status`` that names no task state is ``InvalidParams`` (:func:`status_refusal`: the
  SDK's parsers would read it as "any state", so the raw request is checked first);
* the SDK's handler then checks ``pageSize``/``historyLength`` and trims history and
  artifacts (``includeArtifacts``).

Only the :data:`SCAN_LIMIT` most recently created conversations are looked at.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from typing import Final

from a2a.types.a2a_pb2 import ListTasksRequest, ListTasksResponse, Task, TaskState
from a2a.utils.constants import DEFAULT_LIST_TASKS_PAGE_SIZE
from a2a.utils.errors import InvalidParamsError
from a2a.utils.task import ListTasksCursor, decode_list_tasks_cursor, encode_list_tasks_cursor

from jidocode.shared.events.conversation import ConversationSummary

__all__ = [
    "READS",
    "SCAN_LIMIT",
    "candidates",
    "check_token",
    "moment",
    "page",
    "sort_key",
    "status_refusal",
    "unknown_status",
]

#: How many of the project's conversations (newest first) a listing considers.
SCAN_LIMIT: Final = 500
#: Timelines read at once while listing.
READS: Final = 8
#: What the JS SDK (ts-proto) sends for a ``status`` its caller left unset: no filter, as unset.
_UNSET_BY_TS_PROTO: Final = "UNRECOGNIZED"
#: What a ``ListTasks`` ``status`` may be: a task state's name or number.
_STATES: Final[frozenset[str | int]] = frozenset([*TaskState.keys(), *TaskState.values()])


def moment(summary: ConversationSummary) -> datetime | None:
    """When the conversation last did something (its last journal entry, else its record)."""
    for value in (summary.last_activity, summary.updated_at, summary.created_at):
        if not value:
            continue
        try:
            when = datetime.fromisoformat(value)
        except ValueError:
            continue
        return when if when.tzinfo else when.replace(tzinfo=UTC)
    return None


def sort_key(task: Task) -> tuple[bool, int, str]:
    """The SDK's ``ListTasks`` order: (has a timestamp, timestamp, id), listed descending."""
    has = task.status.HasField("timestamp")
    return has, task.status.timestamp.ToNanoseconds() if has else 0, task.id


def candidates(
    summaries: Iterable[ConversationSummary], params: ListTasksRequest
) -> list[ConversationSummary]:
    """The conversations the filters known before reading a timeline keep."""
    after = (
        params.status_timestamp_after.ToDatetime(tzinfo=UTC)
        if params.HasField("status_timestamp_after")
        else None
    )
    kept = []
    for summary in summaries:
        if params.context_id and summary.conversation_id != params.context_id:
            continue
        when = moment(summary)
        if after is not None and (when is None or when < after):
            continue
        kept.append(summary)
    return kept


def status_refusal(status: object) -> str | None:
    """Why the raw ``status`` of a ``ListTasks`` request names no task state (a name such as
    ``TASK_STATE_WORKING``, or its number); ``None`` when it names one or is absent."""
    if status is None or status in _STATES or status == _UNSET_BY_TS_PROTO:
        return None
    if isinstance(status, str) and status.isdigit() and int(status) in _STATES:
        return None
    return f"status {str(status)[:64]!r} is no task state: one of {', '.join(TaskState.keys()[1:])}"


def unknown_status(body: object) -> tuple[str | int | None, str] | None:
    """``(request id, message)`` when ``body`` is a JSON-RPC ``ListTasks`` whose ``status`` names
    no task state, else ``None``."""
    if not isinstance(body, dict) or body.get("method") != "ListTasks":
        return None
    params = body.get("params")
    refusal = status_refusal(params.get("status") if isinstance(params, dict) else None)
    if refusal is None:
        return None
    request_id = body.get("id")
    return (request_id if isinstance(request_id, str | int) else None, refusal)


def check_token(params: ListTasksRequest) -> ListTasksCursor | None:
    if not params.page_token:
        return None
    cursor = decode_list_tasks_cursor(params.page_token)
    if cursor is None:
        raise InvalidParamsError(
            message=f"page token {params.page_token[:64]!r} was not made by this agent: "
            "pass the nextPageToken of a previous ListTasks, or none for the first page"
        )
    return cursor


def page(tasks: Sequence[Task], params: ListTasksRequest) -> ListTasksResponse:
    """The page of the (filtered) tasks ``params`` asks for, in the SDK's order."""
    cursor = check_token(params)
    ordered = sorted(tasks, key=sort_key, reverse=True)
    start = 0
    if cursor is not None:
        after = cursor.sort_key()
        start = next((i for i, task in enumerate(ordered) if sort_key(task) < after), len(ordered))
    size = params.page_size or DEFAULT_LIST_TASKS_PAGE_SIZE
    end = start + size
    token = ""
    if end < len(ordered):
        last = ordered[end - 1]
        has, stamp, task_id = sort_key(last)
        token = encode_list_tasks_cursor(
            ListTasksCursor(timestamp_ns=stamp if has else None, task_id=task_id)
        )
    listed = ordered[start:end]
    return ListTasksResponse(
        tasks=listed, next_page_token=token, page_size=len(listed), total_size=len(ordered)
    )
