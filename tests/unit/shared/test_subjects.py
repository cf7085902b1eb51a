"""Subject builders: a table of expected subjects, and the validation of every token."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from jidocode.shared import subjects as s

P, C = "01PROJ", "01CONV"

TABLE = [
    (s.engine("start_project"), "jido.engine.start_project"),
    (s.project(P, "info"), "jido.project.01PROJ.info"),
    (s.conversations(P, "start"), "jido.conversations.01PROJ.start"),
    (s.tools(P, "run"), "jido.tools.01PROJ.run"),
    (s.assets(P, "list"), "jido.assets.01PROJ.list"),
    (s.conversation_in(P, C), "jido.conv.01PROJ.01CONV.in"),
    (
        s.conversation_out(P, C, "conversation.user.message"),
        "jido.evt.01PROJ.01CONV.conversation.user.message",
    ),
    (s.journal(P, C), "jido.journal.01PROJ.01CONV"),
    (s.signal("project.started"), "jido.sig.project.started"),
    (s.signal("skill/registry/updated"), "jido.sig.skill.registry.updated"),
    (s.hook("skill/pdf_processor/pre"), "jido.hook.skill.pdf_processor.pre"),
    (s.conversation_in_filter(), "jido.conv.*.*.in"),
    (s.conversation_out_filter(P), "jido.evt.01PROJ.*.>"),
    (s.conversation_out_filter(P, C), "jido.evt.01PROJ.01CONV.>"),
    (s.journal_filter(P), "jido.journal.01PROJ.*"),
    (s.signal_filter(), "jido.sig.>"),
    (s.hook_filter(), "jido.hook.>"),
    (s.all_subjects(), "jido.>"),
    (s.project_pattern("info"), "jido.project.*.info"),
    (s.conversations_pattern("start"), "jido.conversations.*.start"),
    (s.tools_pattern("run"), "jido.tools.*.run"),
    (s.assets_pattern("get"), "jido.assets.*.get"),
    (s.srv("PING"), "$SRV.PING"),
    (s.srv("INFO", "engine"), "$SRV.INFO.jidocode-engine"),
    (s.srv("STATS", "tool_runner"), "$SRV.STATS.jidocode-tool-runner"),
]


@pytest.mark.parametrize(("built", "expected"), TABLE)
def test_subject_table(built: str, expected: str) -> None:
    assert built == expected


@pytest.mark.parametrize("bad", ["", "a.b", "*", ">", "a b", "a\n", "ü", "x" * 129, "a>"])
def test_bad_ids_are_refused(bad: str) -> None:
    with pytest.raises(ValueError, match="invalid"):
        s.project(bad, "info")
    with pytest.raises(ValueError, match="invalid"):
        s.conversation_in(P, bad)


@pytest.mark.parametrize("bad", ["a..b", "a.*", "a.>", "", "a b", "x/"])
def test_bad_event_types_are_refused(bad: str) -> None:
    with pytest.raises(ValueError, match="invalid event type"):
        s.signal(bad)


def test_ids_are_read_back_from_subjects() -> None:
    assert s.project_id_of(s.tools(P, "run")) == P
    assert s.project_id_of(s.conversation_in(P, C)) == P
    assert s.conversation_id_of(s.conversation_out(P, C, "a.b")) == C
    with pytest.raises(ValueError):
        s.project_id_of("jido.engine.start_project")
    with pytest.raises(ValueError):
        s.srv("DELETE")


@given(st.text(min_size=1, max_size=40))
def test_a_built_subject_never_gains_tokens_or_wildcards(value: str) -> None:
    try:
        subject = s.tools(value, "run")
    except ValueError:
        return
    assert subject.count(".") == 3 and "*" not in subject and ">" not in subject
