"""``/rewind`` in the chat (cli/chat_rewind.py) and the SDK's choices behind it (client/_rewind.py)."""

from __future__ import annotations

from typing import Any

from jidocode.cli.chat import BUILTINS, parse_input
from jidocode.cli.chat_rewind import diff_lines, message_lines, parse_rewind
from jidocode.client import UserMessageRef, rewindable_messages
from jidocode.client._rewind import checkpoint_before
from jidocode.shared.events.tools import CheckpointDiff, CheckpointInfo


def _entry(kind: str, entry_id: str, **data: Any) -> dict[str, Any]:
    return {"id": entry_id, "type": kind, "data": data}


def test_rewind_is_a_builtin_reading_a_number_and_what() -> None:
    assert "rewind" in BUILTINS
    typed = parse_input("/rewind 2 files")
    assert (typed.kind, typed.name, typed.arguments) == ("builtin", "rewind", "2 files")
    assert parse_rewind("2 files") == (2, "files")
    assert parse_rewind("c") == (None, "conversation")
    assert parse_rewind("") == (None, None)


def test_message_text_is_shown_escaped_and_cut() -> None:
    hostile = UserMessageRef(id="m1", text="[bold red]pwned[/] " + "x" * 100)
    (line,) = message_lines([hostile])
    assert "\\[bold red]pwned" in line and line.endswith("…")


def test_the_diff_names_the_files_kept_because_the_user_changed_them() -> None:
    info = CheckpointInfo(id="abcd1234", conversation_id="c", turn_id="m1", created_at=1.0)
    diff = CheckpointDiff(
        checkpoint=info, modified=["a.py", "[x].py"], deleted=["new.txt"], changed_by_user=["a.py"]
    )
    lines = diff_lines(diff)
    assert lines[0].startswith("  restore    a.py") and "changed since by you: kept" in lines[0]
    assert "\\[x].py" in lines[1] and lines[2].startswith("  delete     new.txt")


def test_the_messages_a_rewind_can_reach_leave_out_those_rewound_away_and_compacted() -> None:
    timeline = [
        _entry("conversation.user.message", "m1", text="one"),
        _entry("conversation.user.message", "m2", text="two"),
        _entry("conversation.user.message", "m3", text="three"),
        _entry("conversation.rewound", "r1", message_id="m2", to_index=1),
        _entry("conversation.user.message", "m4", text="four"),
    ]
    assert [m.id for m in rewindable_messages(timeline)] == ["m1", "m4"]
    compacted = [*timeline, _entry("conversation.compaction.completed", "x", to_index=4)]
    assert [m.id for m in rewindable_messages(compacted)] == ["m4"]


def test_the_files_before_a_message_are_the_first_checkpoint_from_it_on() -> None:
    def made(turn: str, at: float) -> CheckpointInfo:
        return CheckpointInfo(id=f"id-{turn}", conversation_id="c", turn_id=turn, created_at=at)

    checkpoints = [made("m1", 1.0), made("m3", 3.0), made("m4", 4.0)]
    ids = ["m1", "m2", "m3", "m4"]
    assert checkpoint_before(checkpoints, ids, "m2") == checkpoints[1]  # m2's turn wrote nothing
    assert checkpoint_before(checkpoints, ids, "m1") == checkpoints[0]
    assert checkpoint_before(checkpoints[:1], ids, "m2") is None  # no turn since wrote files
