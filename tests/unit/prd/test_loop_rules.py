"""The PRD loop's decisions without effects: outcomes, retries, relayed events, record writes, refusals."""

from __future__ import annotations

import pytest

from jidocode.services.prd.loop_rules import (
    MAX_FAILURE_TEXT,
    LoopFailed,
    Outcome,
    RelayContext,
    cap,
    cap_input,
    checks_outcome,
    commit_message,
    halt_plan,
    iteration_outcome,
    lease_lapsed,
    loop_event,
    progress_entry,
    record_changes,
    resume_refusal,
    retry_delay,
    run_refusal,
    transcript_line,
)
from jidocode.services.prd.model import UserStory
from jidocode.services.prd.providers.base import IterationResult, ProviderEvent
from jidocode.services.prd.quality import QualityReport
from jidocode.services.prd.retry import RetryPolicy
from jidocode.shared.errors import Conflict
from jidocode.shared.events.prd import (
    CheckOutcome,
    LoopInfo,
    LoopState,
    PrdAssistantText,
    PrdCommandOutput,
    PrdError,
    PrdIterationFinished,
    PrdIterationStarted,
    PrdToolFinished,
    PrdToolStarted,
)
from jidocode.shared.lease import Seen

STORY = UserStory(id="US-001", title="Add a button")
CTX = RelayContext(story_id="US-001", attempt=2, provider="p", model="m", work_dir="/w", elapsed_s=1.23456)


def _info(state: LoopState, owner: str = "") -> LoopInfo:
    return LoopInfo(project_id="p1", prd="demo", state=state, owner=owner)


# -- outcomes and retries ------------------------------------------------------------------------------


def test_a_successful_iteration_and_passing_checks_make_no_failure() -> None:
    assert iteration_outcome(IterationResult(ok=True)) is None
    assert checks_outcome(QualityReport([CheckOutcome(command="make", ok=True)])) is None


def test_a_failed_iteration_says_why_falling_back_to_its_kind() -> None:
    assert iteration_outcome(IterationResult(ok=False, failure="fatal", error="no key")) == Outcome(
        False, "fatal", "no key"
    )
    assert iteration_outcome(IterationResult(ok=False, summary="gave up")) == Outcome(
        False, "transient", "gave up"
    )
    assert iteration_outcome(IterationResult(ok=False)) == Outcome(
        False, "transient", "the provider's iteration failed (transient)"
    )


def test_failing_checks_name_the_commands_and_keep_their_output_tail() -> None:
    report = QualityReport(
        [
            CheckOutcome(command="ruff", ok=True, exit_code=0),
            CheckOutcome(command="pytest", ok=False, exit_code=1, output="x" * (2 * MAX_FAILURE_TEXT)),
            CheckOutcome(command="mypy", ok=False, exit_code=2, output="bad type"),
        ]
    )
    outcome = checks_outcome(report)
    assert outcome is not None
    assert (outcome.ok, outcome.kind, outcome.reason) == (False, "checks", "checks failed: pytest, mypy")
    assert len(outcome.failure_text) == MAX_FAILURE_TEXT
    assert outcome.failure_text.endswith("$ mypy\n(exit 2)\nbad type")


def test_retries_follow_the_policy_then_fail_naming_the_story() -> None:
    policy = RetryPolicy(max_retries=2, retry_delays_s=[0.0, 5.0])
    checks = Outcome(False, "checks", "checks failed: pytest")
    assert retry_delay(policy, checks, "US-001", 1) == 0.0
    assert retry_delay(policy, checks, "US-001", 2) == 5.0
    with pytest.raises(LoopFailed) as out:
        retry_delay(policy, checks, "US-001", 3)
    assert out.value.kind == "checks"
    assert out.value.message == "story US-001 failed on attempt 3 (out of retries): checks failed: pytest"


def test_a_failure_that_is_not_retried_ends_at_once() -> None:
    with pytest.raises(LoopFailed) as out:
        retry_delay(RetryPolicy(), Outcome(False, "fatal", "no key"), "US-002", 1)
    assert out.value.message == "story US-002 failed on attempt 1 (not retried): no key"


# -- the record ----------------------------------------------------------------------------------------


def test_a_record_write_numbers_the_info() -> None:
    changes = record_changes(_info("running"), {"attempt": 3}, seq=7)
    assert changes == {"info": _info("running").model_copy(update={"attempt": 3, "seq": 7})}


# -- the owner's lease ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("lease", "now", "lapsed"),
    [
        (Seen(20, "prd/a", since=100.0), 109.0, False),  # renewed within the lease
        (Seen(20, "prd/a", since=100.0), 111.0, True),  # unrenewed for longer: its owner is gone
        (Seen(20, None, since=100.0), 100.0, True),  # freed after the record's last write: at once
        (Seen(5, None, since=100.0), 109.0, False),  # free since before it: a claim about to take it
        (Seen(0, None, since=100.0), 109.0, False),  # never written (a record older than leases)
        (Seen(5, None, since=100.0), 111.0, True),  # ...until it stayed free for the lease
    ],
)
def test_when_a_running_loops_lease_has_lapsed(lease: Seen, now: float, lapsed: bool) -> None:
    assert lease_lapsed(lease, 10, now, 10.0) is lapsed


def test_a_state_change_clears_a_pending_request() -> None:
    changes = record_changes(
        _info("running"), {"state": "paused"}, seq=1, failed_checks="", iteration_id="it1"
    )
    assert changes["info"].state == "paused"
    assert (changes["request"], changes["request_reason"]) == ("", "")
    assert (changes["failed_checks"], changes["iteration_id"]) == ("", "it1")


# -- relayed events ------------------------------------------------------------------------------------


def test_each_provider_event_becomes_its_loop_event() -> None:
    common = {"story_id": "US-001", "attempt": 2, "metadata": {"k": "v"}}
    cases = [
        (ProviderEvent(kind="iteration_started", metadata={"k": "v"}), PrdIterationStarted),
        (ProviderEvent(kind="assistant_text", text="hi", metadata={"k": "v"}), PrdAssistantText),
        (
            ProviderEvent(kind="tool_started", tool="bash", input={"c": "ls"}, metadata={"k": "v"}),
            PrdToolStarted,
        ),
        (ProviderEvent(kind="tool_finished", call_id="c1", metadata={"k": "v"}), PrdToolFinished),
        (ProviderEvent(kind="command_output", command="ls", metadata={"k": "v"}), PrdCommandOutput),
        (ProviderEvent(kind="iteration_finished", ok=False, metadata={"k": "v"}), PrdIterationFinished),
        (ProviderEvent(kind="error", metadata={"k": "v"}), PrdError),
    ]
    for event, cls in cases:
        relayed = loop_event(event, CTX)
        assert relayed is not None and relayed[0] is cls, event.kind
        assert {k: relayed[1][k] for k in common} == common
    started = loop_event(cases[0][0], CTX)
    assert started is not None and (started[1]["provider"], started[1]["model"], started[1]["work_dir"]) == (
        "p",
        "m",
        "/w",
    )
    finished = loop_event(cases[5][0], CTX)
    assert finished is not None and (finished[1]["ok"], finished[1]["duration_s"]) == (False, 1.235)
    tool = loop_event(cases[3][0], CTX)
    assert tool is not None and (tool[1]["tool"], tool[1]["ok"]) == ("?", True)
    error = loop_event(cases[6][0], CTX)
    assert error is not None and (error[1]["kind"], error[1]["message"]) == ("provider", "provider error")
    output = loop_event(cases[4][0], CTX)
    assert output is not None and output[1]["source"] == "provider"


def test_long_text_is_capped_saying_how_much_was_left_out() -> None:
    assert cap("abcdef", 4) == "abcd… [2 more characters]"
    assert cap("abc", 4) == "abc"
    capped = cap_input({f"k{i}": "y" * 5000 for i in range(60)})
    assert len(capped) == 50 and capped["k0"] == cap("y" * 5000, 4000)
    relayed = loop_event(ProviderEvent(kind="assistant_text", text="z" * 40_000), CTX)
    assert relayed is not None and relayed[1]["text"] == cap("z" * 40_000)


def test_the_transcript_keeps_text_tools_and_errors() -> None:
    assert transcript_line(ProviderEvent(kind="assistant_text", text="hello")) == "hello"
    assert (
        transcript_line(ProviderEvent(kind="tool_started", tool="bash", input={"a": 1}))
        == "[tool bash] {'a': 1}"
    )
    assert transcript_line(ProviderEvent(kind="error", text="boom")) == "[error] boom"
    assert transcript_line(ProviderEvent(kind="tool_finished")) is None


# -- a passed story --------------------------------------------------------------------------------------


def test_a_passed_story_commit_and_progress_say_which_attempt() -> None:
    assert (
        commit_message("demo", STORY, 2) == "US-001: Add a button\n\nPRD demo, attempt 2 (jidocode prd loop)"
    )
    assert (
        progress_entry(STORY, 1, "", "  ")
        == "US-001 Add a button: passed on attempt 1; not committed (commit off)"
    )
    assert progress_entry(STORY, 2, "commit abc", " did it \n") == (
        "US-001 Add a button: passed on attempt 2; commit abc\n\ndid it"
    )


# -- refusals and halts ----------------------------------------------------------------------------------


def test_a_run_is_refused_while_the_prd_is_held() -> None:
    assert run_refusal("demo", None) is None
    assert run_refusal("demo", _info("completed")) is None
    paused = run_refusal("demo", _info("paused"))
    assert isinstance(paused, Conflict)
    assert paused.message == "the loop of PRD 'demo' is paused: one loop per PRD (resume or stop it)"
    running = run_refusal("demo", _info("running", owner="r2"))
    assert running is not None
    assert running.message == "the loop of PRD 'demo' is running on r2: one loop per PRD (stop it first)"


def test_only_a_paused_loop_resumes() -> None:
    assert resume_refusal("demo", _info("paused")) is None
    running = resume_refusal("demo", _info("running"))
    assert running is not None and running.message.endswith("not paused: it runs already")
    done = resume_refusal("demo", _info("completed"))
    assert done is not None and done.message.endswith("not paused: start a new one with run")


def test_halting_a_loop_run_elsewhere() -> None:
    assert halt_plan("demo", _info("paused"), "paused", alive=False, owner="me") == "done"
    assert halt_plan("demo", _info("error"), "stopped", alive=False, owner="me") == "done"
    assert halt_plan("demo", _info("running", owner="r2"), "paused", alive=True, owner="me") == "ask"
    assert halt_plan("demo", _info("running", owner="r2"), "stopped", alive=False, owner="me") == "offline"
    assert halt_plan("demo", _info("running", owner="me"), "stopped", alive=True, owner="me") == "offline"
    assert halt_plan("demo", _info("paused"), "stopped", alive=True, owner="me") == "offline"
    with pytest.raises(Conflict, match="is completed: there is nothing to pause"):
        halt_plan("demo", _info("completed"), "paused", alive=False, owner="me")
