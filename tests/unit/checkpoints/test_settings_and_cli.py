"""The user's ``checkpoints`` settings, and the CLI's rendering of untrusted labels and paths."""

from __future__ import annotations

import json
from pathlib import Path

from jidocode.cli.checkpoints import diff_lines, shown
from jidocode.services.tool_runner.checkpoints.settings import CheckpointSettings, user_checkpoint_settings
from jidocode.shared.events.tools import CheckpointDiff, CheckpointInfo


def test_the_users_section_applies_and_an_error_keeps_the_defaults_without_expiry(tmp_path: Path) -> None:
    assert user_checkpoint_settings(tmp_path) == CheckpointSettings()  # no file
    (tmp_path / "settings.json").write_text(json.dumps({"checkpoints": {"max_per_conversation": 5}}))
    assert user_checkpoint_settings(tmp_path).max_per_conversation == 5
    for bad in ('{"checkpoints": {"max_age_days": -1}}', '{"checkpoints": {"nope": 1}}', "{not json"):
        (tmp_path / "settings.json").write_text(bad)
        assert user_checkpoint_settings(tmp_path) == CheckpointSettings(expire=False), bad


def test_labels_and_paths_are_shown_with_control_characters_escaped() -> None:
    assert shown("a\x1b[31mred\x07\nb") == "a\\x1b[31mred\\x07\\nb"
    info = CheckpointInfo(id="0" * 12, conversation_id="c", turn_id="t", created_at=0.0)
    diff = CheckpointDiff(
        checkpoint=info, added=["x\x1b]0;pwned\x07"], modified=["m"], deleted=["d"], changed_by_user=["m"]
    )
    assert diff_lines(diff) == [
        "+ x\\x1b]0;pwned\\x07",
        "~ m  (changed since by the user)",
        "- d",
    ]
