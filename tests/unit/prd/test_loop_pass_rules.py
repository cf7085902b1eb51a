"""When a story passes, the budgets and the notices' configuration (issue 28 points 1 and 4), pure:
the completion marker, ``nothing_done``, the budget reasons, the reported cost, ``notify`` hooks
as the layers give them (an untrusted project's ignored), the warnings of a configuration."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from jidocode.services.prd.config import (
    LoadedConfig,
    NotifyHook,
    PrdConfig,
    config_warnings,
    doctor_check,
    load_config,
    load_config_report,
)
from jidocode.services.prd.loop_rules import (
    budget_reason,
    cost_of,
    done_outcome,
    nothing_done_outcome,
)
from jidocode.services.prd.model import parse_prd_data
from jidocode.services.prd.prompt import DONE_MARKER, build_prompt, reports_done
from jidocode.services.prd.providers.base import IterationResult
from jidocode.services.prd.retry import RetryPolicy
from jidocode.shared.errors import InvalidInput
from jidocode.shared.events.prd import LoopInfo
from jidocode.shared.trust import trust_project

from .conftest import doc, story

# --- the completion marker ------------------------------------------------------------------------


def test_the_marker_counts_only_as_the_last_line_of_the_final_message() -> None:
    assert reports_done(f"Implemented the story.\n{DONE_MARKER}")
    assert reports_done(f"Done.\n\n  `{DONE_MARKER}`  \n\n")
    assert not reports_done(f"{DONE_MARKER}\nBut the tests still fail.")
    assert not reports_done("I could not finish it.")
    assert not reports_done("")
    assert not reports_done(f"I will end with {DONE_MARKER} when done.")


@given(st.text(max_size=200))
def test_text_not_ending_with_the_marker_never_reports_done(text: str) -> None:
    lines = [line.strip().strip("`").strip() for line in text.splitlines() if line.strip()]
    assert reports_done(text) == (bool(lines) and lines[-1] == DONE_MARKER)


def test_the_story_prompt_asks_for_the_marker() -> None:
    prd = parse_prd_data(doc(story("US-001")))
    assert DONE_MARKER in build_prompt(prd, prd.user_stories[0])


# --- nothing done -----------------------------------------------------------------------------------


def test_an_iteration_that_says_it_is_not_done_is_nothing_done() -> None:
    failed = done_outcome(IterationResult(ok=True, done=False), "US-007")
    assert failed is not None and failed.kind == "nothing_done"
    assert "story US-007" in failed.reason and DONE_MARKER in failed.failure_text
    # said done, or no such signal (a CLI provider's own status counts)
    assert done_outcome(IterationResult(ok=True, done=True), "US-007") is None
    assert done_outcome(IterationResult(ok=True), "US-007") is None


def test_nothing_changed_and_nothing_checked_is_nothing_done() -> None:
    failed = nothing_done_outcome("US-002", changed=False, checks_ran=0)
    assert failed is not None and failed.kind == "nothing_done"
    assert failed.reason == "story US-002: nothing changed and no quality check ran"
    assert nothing_done_outcome("US-002", changed=True, checks_ran=0) is None
    assert nothing_done_outcome("US-002", changed=False, checks_ran=1) is None


def test_nothing_done_is_retried() -> None:
    assert RetryPolicy().retryable("nothing_done")


# --- budgets ----------------------------------------------------------------------------------------


def _info(**kw: object) -> LoopInfo:
    return LoopInfo(project_id="p", prd="auth", **kw)  # type: ignore[arg-type]


def test_no_budget_never_pauses() -> None:
    assert budget_reason(PrdConfig(), _info(iterations=10**6, cost_usd=10**6)) is None


def test_max_iterations_pauses_before_the_iteration_past_it() -> None:
    config = PrdConfig(max_iterations=3)
    assert budget_reason(config, _info(iterations=2)) is None
    reason = budget_reason(config, _info(iterations=3))
    assert reason is not None and "max_iterations is 3" in reason and "resume" in reason


def test_max_cost_usd_pauses_once_spent() -> None:
    config = PrdConfig(max_cost_usd=2.5)
    assert budget_reason(config, _info(cost_usd=2.49)) is None
    reason = budget_reason(config, _info(cost_usd=2.5))
    assert reason is not None and "max_cost_usd is $2.5" in reason


REPORTED_COSTS = [
    ({"cost_usd": "0.25"}, 0.25),
    ({}, 0.0),
    ({"cost_usd": "lots"}, 0.0),
    ({"cost_usd": "-1"}, 0.0),
    ({"cost_usd": "inf"}, 0.0),
    ({"cost_usd": "nan"}, 0.0),
]


@pytest.mark.parametrize(("reported", "cost"), REPORTED_COSTS)
def test_the_cost_is_what_the_provider_reported_when_it_is_a_number(
    reported: dict[str, str], cost: float
) -> None:
    assert cost_of(IterationResult(ok=True, metadata=reported)) == cost


# --- notify hooks and warnings ----------------------------------------------------------------------


def test_a_hook_has_exactly_one_http_target() -> None:
    assert NotifyHook(url="https://hooks.example/x").on == ["completed", "error", "paused"]
    assert NotifyHook(command="true", on=["error"]).on == ["error"]
    for bad in ({}, {"command": "true", "url": "https://x.example"}, {"url": "ftp://x.example/"}):
        with pytest.raises(ValueError):
            NotifyHook.model_validate(bad)
    with pytest.raises(ValueError):
        NotifyHook(url="file:///etc/passwd")
    with pytest.raises(ValueError):
        NotifyHook(url="https://x.example", on=["running"])  # type: ignore[list-item]


def _layers(tmp_path: Path, *, trusted: bool) -> tuple[Path, Path]:
    root = tmp_path / "project"
    (root / ".jido").mkdir(parents=True)
    home = tmp_path / "home"
    home.mkdir()
    if trusted:
        trust_project(root, home=home)
    return root, home


def test_a_bad_hook_in_a_layer_names_the_file_and_field(tmp_path: Path) -> None:
    root, home = _layers(tmp_path, trusted=True)
    (home / "settings.json").write_text(json.dumps({"prd": {"notify": [{"url": "gopher://x.example"}]}}))
    with pytest.raises(InvalidInput, match=r"settings\.json: prd\.notify\[0\]: .*http\(s\) URL"):
        load_config(str(root), env={}, jido_home=str(home))


def test_an_untrusted_projects_notify_is_ignored_and_said(tmp_path: Path) -> None:
    root, home = _layers(tmp_path, trusted=False)
    (home / "settings.json").write_text(json.dumps({"prd": {"quality_commands": ["true"]}}))
    hook = {"notify": [{"url": "https://attacker.example/collect"}]}
    (root / ".jido" / "settings.json").write_text(json.dumps({"prd": hook}))
    report = load_config_report(str(root), env={}, jido_home=str(home))
    assert report.config.notify == [] and report.config.quality_commands == ["true"]
    [warning] = config_warnings(report)
    assert "not trusted" in warning and "notify" in warning

    trust_project(root, home=home)
    trusted = load_config_report(str(root), env={}, jido_home=str(home))
    assert [h.url for h in trusted.config.notify] == ["https://attacker.example/collect"]


def test_no_quality_commands_is_a_warning() -> None:
    [warning] = config_warnings(LoadedConfig(config=PrdConfig()))
    assert "no quality commands are configured" in warning
    assert config_warnings(LoadedConfig(config=PrdConfig(quality_commands=["pytest -q"]))) == []


def test_the_doctor_line_warns_without_quality_commands_and_on_a_bad_layer(tmp_path: Path) -> None:
    root, home = _layers(tmp_path, trusted=True)
    settings = home / "settings.json"
    env = {"JIDO_CODE_HOME": str(home), "XDG_CONFIG_HOME": str(tmp_path / "xdg")}
    with pytest.MonkeyPatch.context() as mp:
        for key, value in env.items():
            mp.setenv(key, value)
        line = doctor_check(str(root))
        assert line["name"] == "prd" and line["status"] == "warn"
        assert "no quality commands" in line["detail"] and "quality_commands" in line["fix"]
        settings.write_text(json.dumps({"prd": {"quality_commands": ["pytest -q"]}}))
        line = doctor_check(str(root))
        assert line["status"] == "ok" and line["detail"].startswith("1 quality command(s) from ")
        settings.write_text(json.dumps({"prd": {"max_iterations": 0}}))
        line = doctor_check(str(root))
        assert line["status"] == "warn" and "prd.max_iterations" in line["detail"]
