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
from jidocode.services.conversation.ownership import lease_owner, orphans_of
from jidocode.services.conversation.record import ConversationRecord
from jidocode.services.conversation.record_store import (
    is_newer,
    limits_of,
    reuse_blocked_until,
    started_record,
    stopped_record,
)
from jidocode.services.conversation.recovery import Tail, backoff_delay, needs_owner
from jidocode.services.conversation.replicas import alive_as_seen, heartbeat_key
from jidocode.services.conversation.residency import loaded_key_of
from jidocode.services.conversation.spec_cache import is_fresh
from jidocode.services.conversation.wakeups import conversation_of
from jidocode.shared import subjects
from jidocode.shared.envelope import Envelope
from jidocode.shared.events.conversation import Cancel, SendEvent
from jidocode.shared.lease import Seen, encode_holder

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


def test_a_heartbeat_is_alive_while_renewed_within_a_ttl() -> None:
    assert alive_as_seen(None, 100.0, 5.0) is None  # never seen: read it
    assert alive_as_seen(Seen(3, "r/1", 95.0), 100.0, 5.0)
    assert not alive_as_seen(Seen(3, "r/1", 94.9), 100.0, 5.0)  # stale: died
    assert not alive_as_seen(Seen(4, None, 99.0), 100.0, 5.0)  # deleted: stopped


def test_a_heartbeat_key_is_a_valid_key_per_token() -> None:
    one, two = heartbeat_key("conversation@host:1/ab12"), heartbeat_key("conversation@host:1/cd34")
    assert one != two and one.startswith("replica.") and one.replace(".", "").isalnum()


def test_orphans_are_keys_of_replicas_not_alive() -> None:
    holders = {"p.mine": Seen(1, "me/1"), "p.dead": Seen(2, "dead/1"), "p.live": Seen(3, "live/1")}
    alive = {"me/1", "live/1"}
    assert orphans_of(holders, [], alive.__contains__) == ["p.dead"]
    assert orphans_of(holders, ["p.dead"], alive.__contains__) == []


def test_only_conversations_with_work_pending_need_an_owner() -> None:
    t = datetime(2026, 11, 29, tzinfo=UTC)
    later = t + timedelta(seconds=1)
    assert not needs_owner(Tail())  # never used
    assert needs_owner(Tail(input_at=t))  # input, nothing journaled yet
    assert needs_owner(Tail(journal_at=t, last_entry="conversation.turn.ended", input_at=later))
    assert not needs_owner(Tail(journal_at=later, last_entry="conversation.turn.ended", input_at=t))
    assert not needs_owner(Tail(journal_at=later, last_entry="conversation.cancel", input_at=t))
    # a turn in flight: a model call or a tool call outstanding
    assert needs_owner(Tail(journal_at=later, last_entry="conversation.llm.requested", input_at=t))
    assert needs_owner(Tail(journal_at=later, last_entry="conversation.tool.requested", input_at=t))


def test_a_failing_conversation_backs_off_exponentially_capped_and_jittered() -> None:
    assert [backoff_delay(n, 1.0, 60.0, 0.999999) for n in (1, 2, 3)] == pytest.approx([1.0, 2.0, 4.0])
    assert backoff_delay(10, 1.0, 60.0, 0.0) == 30.0  # capped, then jittered down to half
    assert 0.5 <= backoff_delay(1, 1.0, 60.0, 0.5) < 1.0


def test_the_loaded_set_keys_name_conversations() -> None:
    assert loaded_key_of("loaded.p1.c1") == "p1.c1"
    assert loaded_key_of("loaded.c1") is None  # the record of a project named "loaded"
    assert loaded_key_of("p1.c1") is None


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


def test_another_run_of_this_replicas_own_instance_is_its_dead_predecessor() -> None:
    from jidocode.services.conversation.replicas import predecessor

    mine = "conversation/conversation-0-4242/aa11"
    assert predecessor("conversation/conversation-0-4242/bb22", mine)  # the run before the restart
    assert not predecessor(mine, mine)  # this run
    assert not predecessor("conversation/conversation-1-4242/bb22", mine)  # a peer replica
    assert not predecessor("conversation/other-host-7/bb22", mine)
