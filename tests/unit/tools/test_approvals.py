"""The approval gate's rules: what is denied, whom to ask, what a session approval remembers."""

from __future__ import annotations

import pytest

from jidocode.services.tool_runner.approvals import (
    SessionApprovals,
    approval_key,
    conversation_to_ask,
    judge,
    refuse_denied,
)
from jidocode.services.tool_runner.errors import CallCancelled
from jidocode.shared.errors import PermissionDenied
from jidocode.shared.policy import Decision, Effect

ALLOW = Decision(effect=Effect.ALLOW, reason="allowed by Read", rule="Read")
ASK = Decision(effect=Effect.ASK, reason="asks by Bash(echo:*)", rule="Bash(echo:*)")
DENY = Decision(effect=Effect.DENY, reason="denied by Edit", rule="Edit", details={"path": "/x"})


def test_refuse_denied_passes_allow_and_ask() -> None:
    assert refuse_denied(ALLOW) is ALLOW
    assert refuse_denied(ASK) is ASK


def test_refuse_denied_names_the_decision() -> None:
    with pytest.raises(PermissionDenied, match="denied by Edit") as caught:
        refuse_denied(DENY)
    assert caught.value.details == {"decision": "deny", "rule": "Edit", "path": "/x"}


@pytest.mark.parametrize(
    ("decision", "conversation_id", "asked"),
    [(ALLOW, None, None), (ALLOW, "c1", None), (ASK, "c1", "c1")],
)
def test_conversation_to_ask(decision: Decision, conversation_id: str | None, asked: str | None) -> None:
    assert conversation_to_ask(decision, conversation_id) == asked


def test_ask_without_a_conversation_is_refused() -> None:
    with pytest.raises(PermissionDenied, match="no conversation to ask: asks by Bash") as caught:
        conversation_to_ask(ASK, None)
    assert caught.value.details["decision"] == "ask"


def test_deny_is_refused_even_with_a_conversation() -> None:
    with pytest.raises(PermissionDenied, match="denied by Edit"):
        conversation_to_ask(DENY, "c1")


def test_approval_key_of_bash_is_the_exact_command() -> None:
    one = approval_key("bash", {"command": "echo hi", "timeout_s": 5}, ASK)
    assert one == approval_key("bash", {"command": "echo hi"}, ASK)
    assert one != approval_key("bash", {"command": "echo hi;rm x"}, ASK)


def test_approval_key_of_a_file_tool_is_the_resolved_path() -> None:
    at = Decision(effect=Effect.ASK, reason="r", path="/p/a.txt")
    assert approval_key("write_file", {"path": "a.txt", "content": "1"}, at) == approval_key(
        "write_file", {"path": "./a.txt", "content": "2"}, at
    )
    assert approval_key("write_file", {"path": "a.txt"}, at) != approval_key(
        "edit_file", {"path": "a.txt"}, at
    )


def test_approval_key_of_another_tool_is_its_arguments_in_any_order() -> None:
    assert approval_key("run_command", {"a": 1, "b": 2}, ASK) == approval_key(
        "run_command", {"b": 2, "a": 1}, ASK
    )
    assert approval_key("run_command", {"a": 1}, ASK) != approval_key("run_command", {"a": 2}, ASK)


def test_judge_approvals() -> None:
    assert judge("approve_session", ASK, 60) is True
    assert judge("approve_once", ASK, 60) is False


@pytest.mark.parametrize(
    ("answer", "message"), [("deny", "the user denied"), ("timeout", "no approval within 2.5 s")]
)
def test_judge_refusals(answer: str, message: str) -> None:
    with pytest.raises(PermissionDenied, match=message) as caught:
        judge(answer, ASK, 2.5)
    assert caught.value.details == {"decision": "ask", "rule": "Bash(echo:*)", "approval": answer}


def test_judge_cancel() -> None:
    with pytest.raises(CallCancelled, match="while waiting for approval") as caught:
        judge("cancelled", ASK, 60)
    assert caught.value.type == "cancelled"


def test_session_approvals_are_per_conversation() -> None:
    s = SessionApprovals()
    s.remember("p", "c1", "k")
    assert s.grants("p", "c1", "k")
    assert not s.grants("p", "c2", "k")
    assert not s.grants("q", "c1", "k")
    assert not s.grants("p", "c1", "other")


def test_session_approvals_are_bounded() -> None:
    s = SessionApprovals(per_conversation=2, conversations=2)
    for key in ("a", "b", "c"):
        s.remember("p", "c1", key)
    assert s.grants("p", "c1", "a") and s.grants("p", "c1", "b")
    assert not s.grants("p", "c1", "c")  # full: a forgotten approval is simply asked again
    s.remember("p", "c2", "x")
    s.remember("p", "c1", "a")  # c1 used last: c2 is now the oldest
    s.remember("p", "c3", "y")
    assert not s.grants("p", "c2", "x")
    assert s.grants("p", "c1", "a") and s.grants("p", "c3", "y")
