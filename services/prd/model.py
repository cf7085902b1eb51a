"""The PRD document (``prd.json``): pydantic models with camelCase keys, and its JSON schema.

Wire format (keys as in the file)::

    {"version": 1, "name": "auth", "title": "...", "description": "...", "branchName": "prd/auth",
     "userStories": [{"id": "US-001", "title": "...", "description": "...",
                      "acceptanceCriteria": ["..."], "priority": 1,
                      "passes": false, "inProgress": false, "notes": "", "attempts": 0}]}

The models are frozen: a PRD changes only through :mod:`.ops`, which returns a new one, so the
loop can persist the value it decided on and nothing else. Unknown keys are refused
(``extra="forbid"``) so a typo in a hand-edited file (``"pases": true``) is an error naming the
key rather than a silently ignored field. Every size is capped because the file is read from the
project (input the model, a teammate or a bad merge wrote) and ends up in prompts and on the bus.

A story's state is derived from its two flags (``passes``, ``inProgress``), the seed's fields;
both true at once, or two stories in progress, cannot be represented in a valid PRD.
"""

from __future__ import annotations

import json
import sys
from typing import Annotated, Any, Final

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, model_validator
from pydantic.alias_generators import to_camel

from jidocode.shared.events.prd import StoryState

__all__ = [
    "MAX_CRITERIA",
    "MAX_CRITERION_CHARS",
    "MAX_DESCRIPTION_CHARS",
    "MAX_NOTES_CHARS",
    "MAX_STORIES",
    "MAX_TITLE_CHARS",
    "NAME_PATTERN",
    "STORY_ID_PATTERN",
    "Prd",
    "UserStory",
    "json_schema",
    "json_schema_text",
    "story_state",
]

#: A PRD's name is one subject token (``jido.prd.<p>.<name>.…``) and one directory name.
NAME_PATTERN: Final = r"^[A-Za-z0-9_\-]{1,64}$"
#: A story id: safe in a path, a commit message and a subject-free log line.
STORY_ID_PATTERN: Final = r"^[A-Za-z0-9_.\-]{1,64}$"
MAX_TITLE_CHARS: Final = 200
MAX_DESCRIPTION_CHARS: Final = 20_000
MAX_CRITERION_CHARS: Final = 2_000
MAX_CRITERIA: Final = 64
MAX_STORIES: Final = 500
#: Notes grow with every attempt (:func:`.ops.record_attempt` keeps the tail within this).
MAX_NOTES_CHARS: Final = 20_000
MAX_PRIORITY: Final = 1_000_000
MAX_ATTEMPTS: Final = 1_000_000

_CONFIG = ConfigDict(
    alias_generator=to_camel,
    populate_by_name=True,
    extra="forbid",
    frozen=True,
    serialize_by_alias=True,
)

Title = Annotated[str, StringConstraints(max_length=MAX_TITLE_CHARS)]
Description = Annotated[str, StringConstraints(max_length=MAX_DESCRIPTION_CHARS)]
Criterion = Annotated[str, StringConstraints(max_length=MAX_CRITERION_CHARS)]


class UserStory(BaseModel):
    """One story: what to build, how to tell it is done, and where the loop is with it."""

    model_config = _CONFIG

    id: str = Field(pattern=STORY_ID_PATTERN)
    title: Annotated[str, StringConstraints(min_length=1, max_length=MAX_TITLE_CHARS)]
    description: Description = ""
    acceptance_criteria: list[Criterion] = Field(default_factory=list, max_length=MAX_CRITERIA)
    #: Lower runs first (file order breaks ties).
    priority: int = Field(default=1, ge=0, le=MAX_PRIORITY)
    passes: bool = False
    #: Sticky: set before the provider runs, cleared only when the story passes (or is reset),
    #: so a loop that dies mid-story picks the same story up again.
    in_progress: bool = False
    notes: Annotated[str, StringConstraints(max_length=MAX_NOTES_CHARS)] = ""
    attempts: int = Field(default=0, ge=0, le=MAX_ATTEMPTS)

    @model_validator(mode="after")
    def _one_state(self) -> UserStory:
        if self.passes and self.in_progress:
            raise ValueError("a story cannot be both passes and inProgress")
        return self


class Prd(BaseModel):
    """The whole document (``prd.json``)."""

    model_config = _CONFIG

    version: int = 1
    name: str = Field(pattern=NAME_PATTERN)
    title: Title = ""
    description: Description = ""
    #: The branch the loop works on; empty: the PRD's default (``RunPrd.branch`` wins).
    branch_name: Annotated[str, StringConstraints(max_length=MAX_TITLE_CHARS)] = ""
    user_stories: list[UserStory] = Field(default_factory=list, max_length=MAX_STORIES)

    @model_validator(mode="before")
    @classmethod
    def _version_first(cls, data: Any) -> Any:
        # checked before the fields so a file of a future version says so, not "unknown key"
        if isinstance(data, dict) and "version" in data and data["version"] != 1:
            raise ValueError(f"version must be 1 (this build reads version 1), got {data['version']!r}")
        return data

    @model_validator(mode="after")
    def _consistent(self) -> Prd:
        seen: set[str] = set()
        running: list[str] = []
        for story in self.user_stories:
            if story.id in seen:
                raise ValueError(f"story id {story.id!r} appears more than once")
            seen.add(story.id)
            if story.in_progress:
                running.append(story.id)
        if len(running) > 1:
            raise ValueError(f"at most one story can be inProgress, found {', '.join(running)}")
        return self

    def story(self, story_id: str) -> UserStory | None:
        """The story of that id, or ``None``."""
        return next((s for s in self.user_stories if s.id == story_id), None)

    def to_json_dict(self) -> dict[str, Any]:
        """The document as ``prd.json`` holds it (camelCase keys)."""
        return self.model_dump(mode="json", by_alias=True)


def story_state(story: UserStory) -> StoryState:
    """``passed``, ``in_progress`` or ``pending``, from the story's two flags."""
    if story.passes:
        return "passed"
    if story.in_progress:
        return "in_progress"
    return "pending"


def json_schema() -> dict[str, object]:
    """The JSON schema of ``prd.json`` (``docs/prd.schema.json`` is this, generated)."""
    schema: dict[str, object] = {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        **Prd.model_json_schema(by_alias=True, mode="validation"),
    }
    return schema


def json_schema_text() -> str:
    """``docs/prd.schema.json`` exactly (regenerate: ``python -m jidocode.services.prd.model``)."""
    return json.dumps(json_schema(), indent=2, sort_keys=True) + "\n"


if __name__ == "__main__":  # pragma: no cover - the generator of the committed schema
    sys.stdout.write(json_schema_text())
