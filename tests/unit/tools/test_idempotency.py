"""The idempotency ledger's record logic (no KV)."""

from __future__ import annotations

import pytest

from jidocode.services.tool_runner.idempotency import (
    DEFAULT_CLAIM_LIFETIME_S,
    READ_ONLY,
    claim_lifetime,
    done_record,
    ledger_key,
    lost_result,
    needs_claim,
    never_started,
    running_record,
    settled,
    time_left,
)
from jidocode.shared import subjects
from jidocode.shared.events.tools import ToolResult
from jidocode.shared.settings import ToolSettings


def test_read_only_builtins_take_no_claim() -> None:
    assert {"read_file", "list_dir", "glob", "grep", "web_fetch"} == READ_ONLY
    assert all(not needs_claim(name) for name in READ_ONLY)
    assert needs_claim("bash") and needs_claim("write_file") and needs_claim("run_workflow")


@pytest.mark.parametrize("request_id", ["r1", "a.b>c *", "é" * 300, ""])
def test_ledger_key_is_a_valid_kv_key_of_the_project(request_id: str) -> None:
    key = ledger_key("P1", request_id)
    project, digest = key.split(".")
    assert project == "P1" and len(digest) == 40
    assert subjects.validate_token(digest, "digest") == digest
    assert key == ledger_key("P1", request_id)


def test_ledger_keys_differ_by_project_and_request() -> None:
    assert ledger_key("P1", "r") != ledger_key("P2", "r")
    assert ledger_key("P1", "r") != ledger_key("P1", "s")
    # the separator keeps ("a", "b.c") and ("a.b", "c") apart
    assert ledger_key("a", "bc")[2:] != ledger_key("ab", "c")[3:]


def test_running_record_is_not_settled() -> None:
    record = running_record("tool_runner/r0", "bash", 100.0)
    assert record == {
        "state": "running",
        "instance": "tool_runner/r0",
        "name": "bash",
        "at": 100.0,
        "started": True,
    }
    assert settled(record) is None
    assert settled({}) is None


def test_only_a_claim_marked_not_started_never_started() -> None:
    assert never_started(running_record("i", "bash", 1.0, started=False))
    assert not never_started(running_record("i", "bash", 1.0))
    assert not never_started({"state": "running", "instance": "i", "at": 1.0})  # older records: it may have
    assert not never_started({"state": "done", "started": False})


def test_done_record_gives_its_result_back() -> None:
    result = ToolResult(ok=True, data={"output": "hi\n"}, logs=["output truncated"])
    assert settled(done_record(result)) == result


def test_cancelled_record_answers_cancelled() -> None:
    answer = settled({"state": "cancelled", "at": 1.0})
    assert answer is not None and not answer.ok
    assert answer.error is not None and answer.error.type == "cancelled"


def test_time_left_of_a_claim() -> None:
    record = running_record("i", "bash", 1000.0)
    assert time_left(record, 1010.0, 60.0) == 50.0
    assert time_left(record, 1070.0, 60.0) == -10.0
    assert time_left({"state": "running"}, 1000.0, 60.0) < 0  # no start time: long gone


def test_lost_claim_is_reported_with_its_instance() -> None:
    result = lost_result(running_record("tool_runner/dead", "bash", 0.0))
    assert not result.ok and result.error is not None
    assert result.error.type == "outcome_unknown"
    assert result.error.details == {"instance": "tool_runner/dead"}
    assert "not run again" in result.error.message


def test_claim_lifetime_covers_the_longest_call() -> None:
    tools = ToolSettings(timeout_s=30, approval_timeout_s=60)
    assert claim_lifetime(tools, 5.0) == 30 + 60 + 5 + 10
    assert claim_lifetime(None, 5.0) == DEFAULT_CLAIM_LIFETIME_S
