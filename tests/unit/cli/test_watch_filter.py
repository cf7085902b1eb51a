"""`jidocode watch` filtering and the `up` restart backoff (pure parts)."""

from __future__ import annotations

import pytest
import typer

from jidocode.cli.up import Backoff
from jidocode.cli.watch import EventFilter, summarize
from jidocode.shared import subjects
from jidocode.shared.envelope import Envelope


def _env(type_: str, **ext: str) -> Envelope:
    return Envelope(
        id="1", source="s", type=type_, data={"text": "hello", "n": 2, "empty": None}, extensions=ext
    )


def test_filters_by_project_conversation_and_type_glob() -> None:
    env = _env("conversation.user.message", projectid="P1", conversationid="C1")
    subject = subjects.conversation_out("P1", "C1", env.type)
    assert EventFilter().matches(env, subject)
    assert EventFilter(project="P1", conversation="C1", types=["conversation.*"]).matches(env, subject)
    assert not EventFilter(project="P2").matches(env, subject)
    assert not EventFilter(conversation="C2").matches(env, subject)
    assert not EventFilter(types=["tool.*"]).matches(env, subject)


def test_project_filter_also_reads_the_subject() -> None:
    env = _env("tool.started")  # no extension, but the subject names the project
    assert EventFilter(project="P1").matches(env, subjects.conversation_out("P1", "C1", "tool.started"))


def test_skill_preset_keeps_hooks_and_skill_signals_only() -> None:
    flt = EventFilter(preset="skill")
    assert flt.matches(_env("skill/pdf/pre"), subjects.hook("skill/pdf/pre"))
    assert flt.matches(_env("skill/registry/updated"), subjects.signal("skill/registry/updated"))
    assert not flt.matches(_env("project.started"), subjects.signal("project.started"))
    with pytest.raises(typer.BadParameter):
        EventFilter(preset="nope")


def test_summary_skips_empty_values() -> None:
    assert summarize(_env("x")) == "text=hello n=2"


def test_backoff_restarts_at_once_then_doubles_to_the_cap_and_resets_after_stable_running() -> None:
    b = Backoff(base=0.5, cap=4, stable=60)
    assert [b.next_delay(1) for _ in range(6)] == [0, 0.5, 1, 2, 4, 4]
    assert b.next_delay(120) == 0
