"""``ListTasks``' pure part: pages in the SDK's order with its cursor tokens, the filters known
before a timeline is read, and the raw ``status`` check."""

from __future__ import annotations

import pytest
from a2a.types.a2a_pb2 import ListTasksRequest, Task, TaskState, TaskStatus
from a2a.utils.errors import InvalidParamsError
from hypothesis import given, settings
from hypothesis import strategies as st

from jidocode.services.gateway.a2a.listing import (
    candidates,
    moment,
    page,
    sort_key,
    status_refusal,
    unknown_status,
)
from jidocode.shared.events.conversation import ConversationSummary


def _task(task_id: str, stamp_s: int | None) -> Task:
    task = Task(id=task_id, context_id=task_id, status=TaskStatus(state=TaskState.TASK_STATE_COMPLETED))
    if stamp_s is not None:
        task.status.timestamp.FromSeconds(stamp_s)
    return task


def _walk(tasks: list[Task], size: int, *, drop_after_first: bool = False) -> list[str]:
    """The ids of every page, following the tokens (``drop_after_first``: the last task of the
    first page disappears before the second page is asked for)."""
    seen: list[str] = []
    request = ListTasksRequest(page_size=size)
    current = list(tasks)
    while True:
        answer = page(current, request)
        assert answer.page_size == len(answer.tasks) <= size
        assert answer.total_size == len(current)
        seen.extend(t.id for t in answer.tasks)
        if not answer.next_page_token:
            return seen
        if drop_after_first and answer.tasks:
            current = [t for t in current if t.id != answer.tasks[-1].id]
            drop_after_first = False
        request.page_token = answer.next_page_token


@settings(max_examples=60, deadline=None)
@given(
    stamps=st.lists(st.one_of(st.none(), st.integers(0, 5)), min_size=0, max_size=30),
    size=st.integers(1, 7),
)
def test_pages_cover_every_task_once_in_the_sdk_order(stamps: list[int | None], size: int) -> None:
    tasks = [_task(f"t{i:02d}", s) for i, s in enumerate(stamps)]
    ids = _walk(tasks, size)
    expected = [t.id for t in sorted(tasks, key=sort_key, reverse=True)]
    assert ids == expected
    # the last task of a page leaving before the next page costs nobody else their place
    assert _walk(tasks, size, drop_after_first=True) == expected


def test_newest_first_then_id_and_tasks_without_a_time_last() -> None:
    tasks = [_task("a", 5), _task("b", None), _task("c", 5), _task("d", 9)]
    assert [t.id for t in page(tasks, ListTasksRequest()).tasks] == ["d", "c", "a", "b"]


def test_a_token_not_made_here_is_invalid_params() -> None:
    with pytest.raises(InvalidParamsError, match="page token"):
        page([_task("a", 1)], ListTasksRequest(page_token="bm90LWEtY3Vyc29y"))


def _summary(cid: str, last: str | None, updated: str = "") -> ConversationSummary:
    return ConversationSummary(conversation_id=cid, status="active", last_activity=last, updated_at=updated)


def test_candidates_keep_the_context_and_the_time_window() -> None:
    summaries = [
        _summary("old", "2026-01-01T00:00:00+00:00"),
        _summary("new", "2026-06-01T00:00:00+00:00"),
        _summary("quiet", None, updated="2026-07-01T00:00:00"),  # naive: read as UTC
        _summary("never", None),
    ]
    after = ListTasksRequest()
    after.status_timestamp_after.FromJsonString("2026-05-01T00:00:00Z")
    assert [s.conversation_id for s in candidates(summaries, after)] == ["new", "quiet"]
    assert [s.conversation_id for s in candidates(summaries, ListTasksRequest(context_id="old"))] == ["old"]
    assert len(candidates(summaries, ListTasksRequest())) == 4
    assert moment(summaries[3]) is None


@pytest.mark.parametrize("status", [None, "TASK_STATE_WORKING", 2, "2", "UNRECOGNIZED"])
def test_a_status_naming_a_state_or_unset_passes(status: object) -> None:
    assert status_refusal(status) is None


@pytest.mark.parametrize("status", ["working", "ALMOST_DONE", 42, "42", ""])
def test_a_status_naming_no_state_is_refused_with_the_states(status: object) -> None:
    refusal = status_refusal(status)
    assert refusal is not None and "TASK_STATE_COMPLETED" in refusal


def test_only_a_json_rpc_list_tasks_is_checked() -> None:
    bad = {"status": "nope"}
    assert unknown_status({"method": "GetTask", "id": 1, "params": bad}) is None
    assert unknown_status("not a body") is None
    found = unknown_status({"method": "ListTasks", "id": 4, "params": bad})
    assert found is not None and found[0] == 4 and "'nope'" in found[1]
