"""Story selection and transitions (pure; seed 004 PRD service contract).

STUB (interface fixed; the ``prd-core`` branch implements it). Each returns a new :class:`Prd`;
a transition that does not apply raises ``jidocode.shared.errors.Conflict`` (unknown story:
``NotFound``) naming the story and its state.
"""

from __future__ import annotations

from .model import Prd, UserStory

__all__ = ["mark_in_progress", "mark_passed", "next_story", "record_attempt", "reset_story"]


def next_story(prd: Prd) -> UserStory | None:
    """The story in progress if there is one (sticky, for recovery), else the pending story of
    lowest ``priority`` (file order breaks ties); ``None`` when every story passed."""
    raise NotImplementedError


def mark_in_progress(prd: Prd, story_id: str) -> Prd:
    raise NotImplementedError


def mark_passed(prd: Prd, story_id: str) -> Prd:
    raise NotImplementedError


def record_attempt(prd: Prd, story_id: str, note: str = "") -> Prd:
    """Count one more attempt of the story (and append ``note`` to its notes)."""
    raise NotImplementedError


def reset_story(prd: Prd, story_id: str) -> Prd:
    """The explicit user action: back to ``pending`` (``passes`` and ``inProgress`` false)."""
    raise NotImplementedError
