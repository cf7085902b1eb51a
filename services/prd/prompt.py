"""The story prompt (pure): what the provider is asked to do for one attempt of one story.

Everything from the PRD (titles, descriptions, criteria), from ``progress.md`` and from a failed
check's output is *data* in this text, quoted in fenced blocks, and only ever travels as the
provider's prompt, never as (part of) a command line. Each piece is capped, so a huge
``progress.md`` or a check that printed megabytes cannot crowd the story out of the model's context.
"""

from __future__ import annotations

from typing import Final

from .model import Prd, UserStory

__all__ = [
    "DONE_MARKER",
    "MAX_CHECK_OUTPUT",
    "MAX_DESCRIPTION",
    "MAX_PROGRESS",
    "RULES",
    "build_prompt",
    "reports_done",
    "tail",
]

#: Characters of ``progress.md`` kept (its end: the latest entries).
MAX_PROGRESS: Final = 4000
#: Characters of the previous attempt's failing check output kept (its end: where errors are).
MAX_CHECK_OUTPUT: Final = 6000
#: Characters of the PRD's description kept.
MAX_DESCRIPTION: Final = 8000

#: The line that ends the final message of an iteration that finished its story (the ``jidocode``
#: provider reads it: docs/decisions/0336-a-pass-means-work-done-and-checked.md).
DONE_MARKER: Final = "<story-done/>"

RULES: Final = (
    "Rules:\n"
    "- Work only in this directory (the current working directory) and its subdirectories.\n"
    "- Do not commit and do not run git commands that change history: the loop commits your "
    "changes when the checks pass.\n"
    "- Implement this one story, nothing else; keep the change small and make the acceptance "
    "criteria hold.\n"
    "- The quality checks run after you finish; a failing check sends the story back to you.\n"
    f"- When the story is done, end your final message with the line {DONE_MARKER} alone; "
    "without it the attempt counts as nothing done and the story comes back to you."
)


def tail(text: str, limit: int) -> str:
    """The last ``limit`` characters of ``text``, marked when cut."""
    if len(text) <= limit:
        return text
    return f"[... {len(text) - limit} earlier characters cut ...]\n" + text[-limit:]


def reports_done(final_text: str) -> bool:
    """Whether a final message says its story is done: its last non-blank line is
    :data:`DONE_MARKER` (blanks and backticks around it allowed)."""
    lines = [line.strip().strip("`").strip() for line in final_text.splitlines() if line.strip()]
    return bool(lines) and lines[-1] == DONE_MARKER


def _head(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    return text[:limit] + f"\n[... {len(text) - limit} more characters cut ...]"


def _fence(text: str) -> str:
    """``text`` in a fence longer than any backtick run inside it (so it cannot close early)."""
    longest = run = 0
    for ch in text:
        run = run + 1 if ch == "`" else 0
        longest = max(longest, run)
    bar = "`" * max(3, longest + 1)
    return f"{bar}text\n{text}\n{bar}"


def build_prompt(
    prd: Prd,
    story: UserStory,
    *,
    attempt: int = 1,
    progress: str = "",
    failed_checks: str = "",
    max_progress: int = MAX_PROGRESS,
    max_check_output: int = MAX_CHECK_OUTPUT,
) -> str:
    """The prompt of attempt ``attempt`` of ``story``.

    ``failed_checks``: the previous attempt's failing check output (empty on a first attempt).
    """
    parts = [
        f"You are working on the product requirements document {prd.name!r}"
        + (f": {prd.title}" if prd.title else "")
        + ".",
    ]
    if prd.description:
        parts.append("About the product:\n" + _fence(_head(prd.description, MAX_DESCRIPTION)))
    parts.append(f"Your story now: {story.id}: {story.title} (attempt {attempt})")
    if story.description:
        parts.append("Story description:\n" + _fence(story.description))
    if story.acceptance_criteria:
        criteria = "\n".join(f"- {c}" for c in story.acceptance_criteria)
        parts.append("Acceptance criteria:\n" + _fence(criteria))
    if progress.strip():
        parts.append(
            "Progress so far (progress.md, latest entries):\n" + _fence(tail(progress, max_progress))
        )
    if failed_checks.strip():
        parts.append(
            "The previous attempt did not pass; fix what is reported:\n"
            + _fence(tail(failed_checks, max_check_output))
        )
    parts.append(RULES)
    return "\n\n".join(parts)
