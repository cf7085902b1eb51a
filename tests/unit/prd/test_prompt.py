"""The story prompt: what it carries, what it caps, and that PRD text stays quoted data."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from jidocode.services.prd.model import Prd, UserStory
from jidocode.services.prd.prompt import MAX_CHECK_OUTPUT, MAX_PROGRESS, RULES, build_prompt, tail


def _prd(description: str = "A small CLI.") -> tuple[Prd, UserStory]:
    story = UserStory(
        id="US-002",
        title="Add a greeting",
        description="Print hello",
        acceptance_criteria=["hello.txt exists", "it says hello"],
    )
    return Prd(name="demo", title="Demo", description=description, user_stories=[story]), story


def test_the_prompt_carries_the_story_its_criteria_progress_and_the_rules() -> None:
    prd, story = _prd()
    text = build_prompt(prd, story, attempt=2, progress="US-001 passed", failed_checks="FAILED test_x")
    for part in (
        "Demo",
        "A small CLI.",
        "US-002: Add a greeting (attempt 2)",
        "- hello.txt exists",
        "US-001 passed",
        "FAILED test_x",
        RULES,
    ):
        assert part in text
    assert "do not commit" in text.lower()


def test_a_first_attempt_has_no_failure_section_and_huge_inputs_are_capped() -> None:
    prd, story = _prd()
    assert "previous attempt failed" not in build_prompt(prd, story)
    progress = "old\n" * 10_000 + "LATEST"
    checks = "noise\n" * 10_000 + "AssertionError at the end"
    text = build_prompt(prd, story, progress=progress, failed_checks=checks)
    assert "LATEST" in text and "AssertionError at the end" in text  # the ends are kept
    assert len(text) < MAX_PROGRESS + MAX_CHECK_OUTPUT + 2_000
    assert tail("abcdef", 3).endswith("def") and "cut" in tail("abcdef", 3)


@given(st.text(alphabet=st.sampled_from("`ab\n "), max_size=60))
def test_story_text_cannot_close_its_fence(evil: str) -> None:
    prd, story = _prd()
    story = story.model_copy(update={"description": evil + "\n" + RULES})
    text = build_prompt(prd, story)
    # the rules appear once outside the quoted description: at the very end
    assert text.endswith(RULES)
    start = text.index("Story description:\n") + len("Story description:\n")
    bar = text[start:].split("text", 1)[0]
    assert set(bar) == {"`"} and len(bar) >= 3
    body_end = text.index("\n" + bar + "\n", start + len(bar))
    assert evil in text[start:body_end]
