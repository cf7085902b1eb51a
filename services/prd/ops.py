"""Story selection and transitions (pure; seed 004 PRD service contract).

Each returns a new :class:`Prd` (the models are frozen); a transition that does not apply raises
``jidocode.shared.errors.Conflict`` naming the story and its state, an unknown story ``NotFound``.

Story states (seed 004)::

    pending --mark_in_progress--> in_progress --mark_passed--> passed
       ^                                                          |
       +------------------- reset_story (explicit user action) ---+ (from any state)

``inProgress`` is sticky: nothing but :func:`mark_passed` and :func:`reset_story` clears it, so a
loop restarted after a crash selects the same story again (:func:`next_story`).
"""

from __future__ import annotations

from jidocode.shared.errors import Conflict, NotFound

from .model import MAX_ATTEMPTS, MAX_NOTES_CHARS, Prd, UserStory, clean_text, story_state

__all__ = ["mark_in_progress", "mark_passed", "next_story", "record_attempt", "reset_story"]

#: Marks the cut when old notes are dropped to keep ``notes`` within its cap.
NOTES_CUT = "…(earlier notes dropped)\n"


def _find(prd: Prd, story_id: str) -> tuple[int, UserStory]:
    for index, story in enumerate(prd.user_stories):
        if story.id == story_id:
            return index, story
    raise NotFound(
        f"PRD {prd.name!r} has no story {story_id!r}",
        details={"prd": prd.name, "story_id": story_id},
    )


def _replace(prd: Prd, index: int, story: UserStory) -> Prd:
    stories = list(prd.user_stories)
    stories[index] = story
    # model_validate, not model_copy: the invariants (one story in progress …) are checked again
    return Prd.model_validate({**dict(prd), "user_stories": stories})


def next_story(prd: Prd) -> UserStory | None:
    """The story in progress if there is one (sticky, for recovery), else the pending story of
    lowest ``priority`` (file order breaks ties); ``None`` when every story passed."""
    pending: UserStory | None = None
    for story in prd.user_stories:
        if story.in_progress:
            return story
        if not story.passes and (pending is None or story.priority < pending.priority):
            pending = story
    return pending


def mark_in_progress(prd: Prd, story_id: str) -> Prd:
    """``pending → in_progress``; the same story already in progress is a no-op (a resumed loop
    marks it again). Another story in progress, or this one passed, is ``Conflict``."""
    index, story = _find(prd, story_id)
    if story.in_progress:
        return prd
    if story.passes:
        raise Conflict(
            f"story {story_id!r} of PRD {prd.name!r} is passed; reset it to work it again",
            details={"prd": prd.name, "story_id": story_id, "state": "passed"},
        )
    other = next((s for s in prd.user_stories if s.in_progress), None)
    if other is not None:
        raise Conflict(
            f"story {other.id!r} of PRD {prd.name!r} is in progress; "
            f"it must pass or be reset before {story_id!r} starts",
            details={"prd": prd.name, "story_id": story_id, "in_progress": other.id},
        )
    return _replace(prd, index, story.model_copy(update={"in_progress": True}))


def mark_passed(prd: Prd, story_id: str) -> Prd:
    """``in_progress → passed``; from any other state ``Conflict`` naming that state."""
    index, story = _find(prd, story_id)
    state = story_state(story)
    if state != "in_progress":
        raise Conflict(
            f"story {story_id!r} of PRD {prd.name!r} is {state}, not in_progress; only a story "
            "in progress can pass",
            details={"prd": prd.name, "story_id": story_id, "state": state},
        )
    return _replace(prd, index, story.model_copy(update={"in_progress": False, "passes": True}))


def _append_note(notes: str, note: str) -> str:
    joined = f"{notes}\n{note}" if notes else note
    if len(joined) <= MAX_NOTES_CHARS:
        return joined
    # keep the newest notes: the next attempt needs the last failure, not the first
    return NOTES_CUT + joined[-(MAX_NOTES_CHARS - len(NOTES_CUT)) :]


def record_attempt(prd: Prd, story_id: str, note: str = "") -> Prd:
    """Count one more attempt of the story (and append ``note`` to its notes, keeping the newest
    notes within ``MAX_NOTES_CHARS``). Any state: an attempt happened, whatever it led to.

    ``note`` may be anything (a check's coloured output): :func:`.model.clean_text` makes it fit.
    """
    index, story = _find(prd, story_id)
    update: dict[str, object] = {"attempts": min(story.attempts + 1, MAX_ATTEMPTS)}
    note = clean_text(note)
    if note:
        update["notes"] = _append_note(story.notes, note)
    return _replace(prd, index, story.model_copy(update=update))


def reset_story(prd: Prd, story_id: str) -> Prd:
    """The explicit user action: back to ``pending`` (``passes`` and ``inProgress`` false).

    Attempts and notes stay: they are the story's history, and the next attempt learns from them.
    """
    index, story = _find(prd, story_id)
    if story_state(story) == "pending":
        return prd
    return _replace(prd, index, story.model_copy(update={"in_progress": False, "passes": False}))
