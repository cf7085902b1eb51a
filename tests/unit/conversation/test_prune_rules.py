"""What a prune deletes (decision 0325): ended conversations idle past the cutoff, tombstones whose
id is free again; the ``conversations.retention_days`` setting and the CLI that falls back on it."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from typer.testing import CliRunner

from jidocode.cli.main import app
from jidocode.services.conversation.prune import (
    project_ids,
    prunable,
    retention_days,
    sweep_period_s,
    tombstone_expired,
)
from jidocode.services.conversation.record import ConversationRecord
from jidocode.shared.events.conversation import ConversationSummary

NOW = datetime(2026, 11, 28, 12, 0, tzinfo=UTC)
CUTOFF = NOW - timedelta(days=30)


def _summary(*, owner: str | None = None, last: str | None = None, updated: str = "") -> ConversationSummary:
    return ConversationSummary(
        conversation_id="c1",
        status="stopped",
        owner=owner,
        created_at="2026-09-01T00:00:00+00:00",
        updated_at=updated or "2026-09-02T00:00:00+00:00",
        last_activity=last,
    )


def test_an_ended_conversation_idle_past_the_cutoff_is_pruned() -> None:
    assert prunable(_summary(last="2026-10-01T00:00:00+00:00"), CUTOFF)


def test_a_conversation_a_replica_runs_is_kept_however_old() -> None:
    assert not prunable(_summary(owner="conversation-1", last="2026-09-01T00:00:00+00:00"), CUTOFF)


@pytest.mark.parametrize(
    ("last", "updated"),
    [
        ("2026-11-20T00:00:00Z", ""),  # journaled recently
        (None, "2026-11-27T00:00:00+00:00"),  # stopped (its record changed) recently
    ],
)
def test_a_recently_active_conversation_is_kept(last: str | None, updated: str) -> None:
    assert not prunable(_summary(last=last, updated=updated), CUTOFF)


def test_a_conversation_whose_times_cannot_be_read_is_kept() -> None:
    summary = ConversationSummary(conversation_id="c1", status="stopped", created_at="?", updated_at="")
    assert not prunable(summary, CUTOFF)


def test_a_tombstone_goes_once_its_id_may_start_again() -> None:
    def tomb(at: datetime) -> ConversationRecord:
        return ConversationRecord(
            project_id="p", conversation_id="c1", status="deleted", created_at="", updated_at=at.isoformat()
        )

    assert tombstone_expired(tomb(NOW - timedelta(minutes=5)), NOW)
    assert not tombstone_expired(tomb(NOW - timedelta(seconds=10)), NOW)  # inside the duplicate window
    live = tomb(NOW - timedelta(days=90)).model_copy(update={"status": "stopped"})
    assert not tombstone_expired(live, NOW)


def test_the_projects_of_the_record_keys() -> None:
    assert project_ids(["p2.c1", "p1.c2", "p1.c3", "odd", "loaded.p3.c4"]) == ["p1", "p2"]


def test_retention_days_is_read_from_the_global_settings(tmp_path: Path) -> None:
    assert retention_days(tmp_path) is None  # off by default
    (tmp_path / "settings.json").write_text(json.dumps({"conversations": {"retention_days": 30}}))
    assert retention_days(tmp_path) == 30.0
    # a bad value fails closed: no sweep on a guess
    (tmp_path / "settings.json").write_text(json.dumps({"conversations": {"retention_days": 0}}))
    assert retention_days(tmp_path) is None


def test_the_sweep_period_names_a_bad_value() -> None:
    assert sweep_period_s({}) == 3600.0
    assert sweep_period_s({"JIDO_RETENTION_SWEEP_S": "60"}) == 60.0
    with pytest.raises(ValueError, match="JIDO_RETENTION_SWEEP_S"):
        sweep_period_s({"JIDO_RETENTION_SWEEP_S": "soon"})


def test_prune_without_days_or_setting_says_what_to_give(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("JIDO_CODE_HOME", str(tmp_path))
    result = CliRunner().invoke(app, ["conversations", "prune", str(tmp_path)])
    assert result.exit_code == 2
    assert "--older-than" in result.output and "conversations.retention_days" in result.output
