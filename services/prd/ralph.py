"""Ralph's ``prd.json`` to a PRD of this system and back (pure).

Ralph (the loop this seed's PRD service follows) keeps one document per feature::

    {"project": "MyApp", "branchName": "ralph/task-priority", "description": "…",
     "userStories": [{"id": "US-001", "title": "…", "description": "…",
                      "acceptanceCriteria": ["…"], "priority": 1, "passes": false, "notes": ""}]}

:func:`from_ralph` reads it as a :class:`~.model.Prd` (``project`` becomes the title, every story
keeps its id, criteria, priority, ``passes`` and notes); :func:`to_ralph` writes a PRD back in
that shape, so a document survives the round trip. :func:`is_ralph` tells the format apart from
a list of stories (``prd new --from``). A document that does not fit is ``InvalidInput`` naming
the field as Ralph spells it (``userStories[2].acceptanceCriteria``); the file is read from
disk by the CLI, so every value is checked by the same models as ``prd.json``.
"""

from __future__ import annotations

import re
from typing import Any, Final

from jidocode.shared.errors import InvalidInput

from .model import MAX_TITLE_CHARS, Prd, parse_prd_data

__all__ = ["RALPH_KEYS", "RALPH_STORY_KEYS", "from_ralph", "is_ralph", "name_of", "to_ralph"]

#: The top-level keys of Ralph's document (``userStories`` is the one that must be there).
RALPH_KEYS: Final = ("project", "branchName", "description", "userStories")
#: The keys of one of Ralph's stories.
RALPH_STORY_KEYS: Final = (
    "id",
    "title",
    "description",
    "acceptanceCriteria",
    "priority",
    "passes",
    "notes",
)
_NOT_NAME: Final = re.compile(r"[^A-Za-z0-9_-]+")


def is_ralph(data: Any) -> bool:
    """Whether ``data`` (a decoded JSON file) is a Ralph document: an object with ``userStories``
    and none of this system's own ``prd.json`` keys (``name``, ``version``)."""
    return isinstance(data, dict) and "userStories" in data and "name" not in data and "version" not in data


def name_of(data: dict[str, Any]) -> str:
    """A PRD name for a Ralph document: the last part of its ``branchName``
    (``ralph/task-priority`` → ``task-priority``), else its ``project``, made a valid name
    (letters, digits, ``_``, ``-``; at most 64). ``InvalidInput`` when neither gives one."""
    for key in ("branchName", "project"):
        value = data.get(key)
        if isinstance(value, str):
            name = _NOT_NAME.sub("-", value.rsplit("/", 1)[-1]).strip("-")[:64].strip("-")
            if name:
                return name
    raise InvalidInput(
        "the Ralph document has neither a branchName nor a project to name the PRD by: give a name",
        details={"field": "branchName"},
    )


def _story(index: int, raw: Any) -> dict[str, Any]:
    if not isinstance(raw, dict):
        raise InvalidInput(
            f"Ralph prd.json: userStories[{index}]: must be an object, got {type(raw).__name__}",
            details={"field": f"userStories[{index}]"},
        )
    unknown = sorted(set(raw) - set(RALPH_STORY_KEYS))
    if unknown:
        raise InvalidInput(
            f"Ralph prd.json: userStories[{index}].{unknown[0]}: not a key of a Ralph story "
            f"(known: {', '.join(RALPH_STORY_KEYS)})",
            details={"field": f"userStories[{index}].{unknown[0]}"},
        )
    return {key: raw[key] for key in RALPH_STORY_KEYS if key in raw}


def from_ralph(data: Any, *, name: str = "") -> Prd:
    """The PRD ``name`` (default :func:`name_of`) of a Ralph document; ``InvalidInput`` naming
    the first field that does not fit (an unknown key, a missing ``userStories``, a bad value)."""
    if not isinstance(data, dict):
        raise InvalidInput("Ralph prd.json: the top level must be a JSON object", details={"field": ""})
    unknown = sorted(set(data) - set(RALPH_KEYS))
    if unknown:
        raise InvalidInput(
            f"Ralph prd.json: {unknown[0]}: not a key of a Ralph document (known: {', '.join(RALPH_KEYS)})",
            details={"field": unknown[0]},
        )
    stories = data.get("userStories")
    if not isinstance(stories, list):
        raise InvalidInput(
            "Ralph prd.json: userStories: must be a list of stories", details={"field": "userStories"}
        )
    title = data.get("project", "")
    doc = {
        "name": name or name_of(data),
        "title": title[:MAX_TITLE_CHARS] if isinstance(title, str) else title,
        "description": data.get("description", ""),
        "branchName": data.get("branchName", ""),
        "userStories": [_story(i, s) for i, s in enumerate(stories)],
    }
    try:
        return parse_prd_data(doc, source="Ralph prd.json")
    except InvalidInput as exc:
        if exc.details.get("field") != "title":
            raise
        # the title is Ralph's ``project``: name the field the file has
        message = exc.message.replace("Ralph prd.json: title:", "Ralph prd.json: project:", 1)
        raise InvalidInput(message, details={**exc.details, "field": "project"}) from None


def to_ralph(prd: Prd) -> dict[str, Any]:
    """``prd`` as Ralph's document: ``project`` is its title; this system's own fields
    (``inProgress``, ``attempts``, ``version``, ``name``) are left out."""
    return {
        "project": prd.title,
        "branchName": prd.branch_name,
        "description": prd.description,
        "userStories": [
            {
                "id": s.id,
                "title": s.title,
                "description": s.description,
                "acceptanceCriteria": list(s.acceptance_criteria),
                "priority": s.priority,
                "passes": s.passes,
                "notes": s.notes,
            }
            for s in prd.user_stories
        ],
    }
