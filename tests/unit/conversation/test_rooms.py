"""The decisions of the conversation runtime's rooms, as pure functions (docs/architecture.md, room map).

Records (``record_store.py``), ownership and failover (``ownership.py``), wake-ups
(``wakeups.py``), endpoints (``endpoints.py``), the tool-spec cache (``spec_cache.py``):
each decides without the bus, and these tests pin what it decides.
"""

from __future__ import annotations

import ast
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from jidocode.services import conversation
from jidocode.services.conversation.core import Limits
from jidocode.services.conversation.deletion import REUSE_AFTER_S
from jidocode.services.conversation.endpoints import RUNTIME_SOURCE, client_input, own_input
from jidocode.services.conversation.ownership import (
    lease_is_free,
    lease_owner,
    sort_marks,
    stale_leases,
)
from jidocode.services.conversation.record import ConversationRecord
from jidocode.services.conversation.record_store import (
    is_newer,
    limits_of,
    reuse_blocked_until,
    started_record,
    stopped_record,
)
from jidocode.services.conversation.spec_cache import is_fresh
from jidocode.services.conversation.wakeups import conversation_of
from jidocode.shared import subjects
from jidocode.shared.envelope import Envelope
from jidocode.shared.events.conversation import Cancel, SendEvent
from jidocode.shared.lease import encode_holder

NOW = "2026-11-28T23:00:00+00:00"


def _record(**update: object) -> ConversationRecord:
    return ConversationRecord(project_id="p", conversation_id="c", created_at="then").model_copy(
        update=update
    )


# -- records ---------------------------------------------------------------------------


def test_a_record_replaces_only_an_older_revision() -> None:
    assert is_newer(None, 1)
    assert is_newer((3, _record()), 4)
    assert not is_newer((3, _record()), 3)
    assert not is_newer((5, None), 4)


def test_a_start_keeps_creation_and_title_and_merges_settings() -> None:
    existing = _record(status="stopped", settings={"a": 1, "b": 1}, title="t")
    started = started_record("p", "c", existing, {"b": 2}, NOW)
    assert (started.status, started.settings, started.created_at, started.title) == (
        "active",
        {"a": 1, "b": 2},
        "then",
        "t",
    )
    fresh = started_record("p", "c", None, {"x": 1}, NOW)
    assert (fresh.created_at, fresh.updated_at, fresh.title) == (NOW, NOW, "")


def test_a_stop_resumes_on_start_only_when_it_cancelled_work() -> None:
    assert not stopped_record(_record(), cancelled=False, now=NOW).resume_on_start
    assert stopped_record(_record(), cancelled=True, now=NOW).resume_on_start
    # an earlier stop that cancelled is not forgotten by a second one that did not
    assert stopped_record(_record(resume_on_start=True), cancelled=False, now=NOW).resume_on_start
    assert stopped_record(_record(), cancelled=False, now=NOW).status == "stopped"


def test_a_deleted_id_is_blocked_until_its_duplicate_window_passed() -> None:
    deleted_at = datetime(2026, 11, 28, 23, 0, tzinfo=UTC)
    tomb = (7, _record(status="deleted", updated_at=deleted_at.isoformat()))
    inside = deleted_at + timedelta(seconds=REUSE_AFTER_S - 1)
    after = deleted_at + timedelta(seconds=REUSE_AFTER_S + 1)
    assert reuse_blocked_until(tomb, inside) == deleted_at + timedelta(seconds=REUSE_AFTER_S)
    assert reuse_blocked_until(tomb, after) is None
    assert reuse_blocked_until((7, _record(status="stopped")), inside) is None
    assert reuse_blocked_until(None, inside) is None
    assert reuse_blocked_until((0, None), inside) is None


def test_limits_take_the_records_max_turns_when_it_is_a_positive_int() -> None:
    base = Limits()
    assert limits_of(_record(settings={"max_turns": 3}), base).max_turns == 3
    for ignored in (0, -1, "5", 2.5, None):
        assert limits_of(_record(settings={"max_turns": ignored}), base).max_turns == base.max_turns


# -- ownership and failover --------------------------------------------------------------


def test_a_lease_names_its_holders_instance() -> None:
    assert lease_owner(encode_holder("conversation@host/ab12cd34")) == "conversation@host"
    # a lease written before the shared primitive named its holder "owner"
    legacy = b'{"owner": "conversation@old/ffff0000", "at": "2026-11-28T23:00:00+00:00"}'
    assert lease_owner(legacy) == "conversation@old"
    for nobody in (None, b"", b"/x"):
        assert lease_owner(nobody) is None


def test_a_lease_may_be_free_once_unseen_for_a_ttl() -> None:
    assert lease_is_free(None, 100.0, 5.0)
    assert not lease_is_free(96.0, 100.0, 5.0)
    assert not lease_is_free(95.0, 100.0, 5.0)
    assert lease_is_free(94.9, 100.0, 5.0)


def test_stale_leases_are_others_unrenewed_for_a_ttl() -> None:
    seen = {"p.mine": 0.0, "p.old": 0.0, "p.fresh": 99.0}
    assert stale_leases(seen, {"p.mine"}, 100.0, 5.0) == {"p.old"}


def test_the_loaded_set_decides_what_a_scan_takes_over() -> None:
    keys = ["p.loaded", "p.error", "p.clean-stale", "p.clean-deleted"]
    marks = sort_marks(keys, [True, TimeoutError(), False, False], stale={"p.clean-stale"})
    assert marks.take == {"p.loaded"}
    assert marks.ask_again == {"p.error"}
    # a stale lease of a cleanly released conversation is forgotten; a deleted one was already
    assert marks.forget == {"p.clean-stale"}


def test_marks_must_answer_every_key() -> None:
    with pytest.raises(ValueError):
        sort_marks(["p.a", "p.b"], [True], stale=set())


# -- wake-ups ----------------------------------------------------------------------------


def test_a_wake_up_names_its_conversation_or_nothing() -> None:
    assert conversation_of(subjects.conversation_in("p1", "c1")) == ("p1", "c1", "p1.c1")
    assert conversation_of("jido.nothing") is None


# -- endpoints ---------------------------------------------------------------------------


def test_a_clients_input_carries_its_request_as_cause() -> None:
    cmd = SendEvent(conversation_id="c", event_type="user.message", data={"text": "hi"})
    request = Envelope.new(cmd, source="cli/x", correlation_id="corr")
    raw = client_input(cmd, request, "e1", NOW)
    assert raw == {
        "id": "e1",
        "type": "user.message",
        "source": "cli/x",
        "data": {"text": "hi"},
        "correlation_id": "corr",
        "causation_id": request.id,
        "time": NOW,
    }
    own = cmd.model_copy(update={"correlation_id": "mine"})
    assert client_input(own, request, "e1", NOW)["correlation_id"] == "mine"
    alone = Envelope.new(cmd, source="cli/x")
    assert client_input(cmd, alone, "e1", NOW)["correlation_id"] == (alone.correlation_id or "e1")


def test_the_services_own_input_is_marked_as_its_own() -> None:
    raw = own_input(Cancel(reason="stop"), "x.stop", NOW)
    assert raw["source"] == RUNTIME_SOURCE and raw["type"] == Cancel.TYPE
    assert raw["data"] == {"reason": "stop"} and raw["correlation_id"] == "x.stop"


# -- the tool-spec cache -----------------------------------------------------------------


def test_a_cached_tool_list_is_fresh_for_its_ttl() -> None:
    assert not is_fresh(None, 10.0, 30.0)
    assert is_fresh((0.0, []), 29.9, 30.0)
    assert not is_fresh((0.0, []), 30.0, 30.0)


# -- the rooms stay small ----------------------------------------------------------------

_ROOMS = ("runtime", "record_store", "ownership", "wakeups", "endpoints", "spec_cache")
_PACKAGE = Path(conversation.__file__).parent


@pytest.mark.parametrize("room", _ROOMS)
def test_a_room_keeps_within_the_size_limits(room: str) -> None:
    """Issue 27: no production file over 600 lines, no function over 80."""
    source = (_PACKAGE / f"{room}.py").read_text()
    assert len(source.splitlines()) <= 600, f"{room}.py has {len(source.splitlines())} lines"
    long = [
        f"{node.name} ({node.end_lineno - node.lineno + 1} lines)"
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and node.end_lineno is not None
        and node.end_lineno - node.lineno + 1 > 80
    ]
    assert not long, f"{room}.py: functions over 80 lines: {long}"
