"""The PRD document (``prd.json``): pydantic models with camelCase keys, and its JSON schema.

STUB (interface fixed; the ``prd-core`` branch implements it).

Wire format (keys as in the file)::

    {"version": 1, "name": "auth", "title": "...", "description": "...", "branchName": "prd/auth",
     "userStories": [{"id": "US-001", "title": "...", "description": "...",
                      "acceptanceCriteria": ["..."], "priority": 1,
                      "passes": false, "inProgress": false, "notes": "", "attempts": 0}]}
"""

from __future__ import annotations

from pydantic import BaseModel

from jidocode.shared.events.prd import StoryState

__all__ = ["Prd", "UserStory", "json_schema", "story_state"]


class UserStory(BaseModel):
    id: str
    title: str
    description: str = ""
    acceptance_criteria: list[str] = []
    priority: int = 1
    passes: bool = False
    in_progress: bool = False
    notes: str = ""
    attempts: int = 0


class Prd(BaseModel):
    version: int = 1
    name: str
    title: str = ""
    description: str = ""
    branch_name: str = ""
    user_stories: list[UserStory] = []


def story_state(story: UserStory) -> StoryState:
    raise NotImplementedError


def json_schema() -> dict[str, object]:
    """The JSON schema of ``prd.json`` (``docs/prd.schema.json`` is this, generated)."""
    raise NotImplementedError
