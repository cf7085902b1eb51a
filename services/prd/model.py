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
import re
import sys
from typing import Annotated, Any, Final

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic.alias_generators import to_camel
from pydantic_core import PydanticCustomError

from jidocode.shared.errors import InvalidInput
from jidocode.shared.events.prd import StoryState

__all__ = [
    "MAX_ATTEMPTS",
    "MAX_BRANCH_CHARS",
    "MAX_CRITERIA",
    "MAX_CRITERION_CHARS",
    "MAX_DESCRIPTION_CHARS",
    "MAX_NOTES_CHARS",
    "MAX_PRD_DESCRIPTION_CHARS",
    "MAX_PRIORITY",
    "MAX_STORIES",
    "MAX_TITLE_CHARS",
    "NAME_PATTERN",
    "STORY_ID_PATTERN",
    "Prd",
    "UserStory",
    "clean_text",
    "error_path",
    "json_schema",
    "json_schema_text",
    "parse_prd_data",
    "story_state",
    "validation_problems",
]

#: A PRD's name is one subject token (``jido.prd.<p>.<name>.…``) and one directory name.
NAME_PATTERN: Final = r"^[A-Za-z0-9_\-]{1,64}$"
#: A story id: safe in a path, a commit message and a subject-free log line.
STORY_ID_PATTERN: Final = r"^[A-Za-z0-9_.\-]{1,64}$"
MAX_TITLE_CHARS: Final = 200
MAX_DESCRIPTION_CHARS: Final = 20_000
#: The PRD's own description may be longer (``CreatePrd.description`` allows as much).
MAX_PRD_DESCRIPTION_CHARS: Final = 100_000
MAX_BRANCH_CHARS: Final = 200
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

_LINE_BAD = re.compile(r"[\x00-\x1f\x7f]")
_TEXT_BAD = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
_ANSI = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)|[@-Z\\-_])")


def _single_line(value: str) -> str:
    # titles end up in commit subjects, log lines and terminal rows: one line, no escapes
    if found := _LINE_BAD.search(value):
        raise ValueError(
            f"must be one line without control characters (found {found.group()!r} at {found.start()})"
        )
    return value


def _plain_text(value: str) -> str:
    # NUL cannot reach a command line or a C string; escapes would drive the user's terminal
    if found := _TEXT_BAD.search(value):
        raise ValueError(
            f"control character {found.group()!r} at {found.start()} (only tab and newlines are allowed)"
        )
    return value


def clean_text(text: str) -> str:
    """``text`` fit for a PRD text field: terminal escape sequences (colours of a check's output)
    and control characters other than tab and newline removed, ``\\r\\n`` made ``\\n``."""
    text = _ANSI.sub("", text).replace("\r\n", "\n").replace("\r", "\n")
    return _TEXT_BAD.sub("", text)


Title = Annotated[str, StringConstraints(max_length=MAX_TITLE_CHARS), AfterValidator(_single_line)]

_BRANCH_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._/\-]*$")


def _branch_ok(value: str) -> bool:
    return (
        bool(_BRANCH_RE.match(value))
        and ".." not in value
        and "//" not in value
        and "/." not in value
        and not value.endswith(("/", ".", ".lock"))
    )


def _problem(field: str, message: str) -> PydanticCustomError:
    """A validation error that names its field (``ctx.field``, relative to where it is raised):
    model validators have no location of their own, and "the document" helps nobody fix a file."""
    return PydanticCustomError("prd_invalid", "{message}", {"field": field, "message": message})


Description = Annotated[str, StringConstraints(max_length=MAX_DESCRIPTION_CHARS), AfterValidator(_plain_text)]
Criterion = Annotated[str, StringConstraints(max_length=MAX_CRITERION_CHARS), AfterValidator(_plain_text)]


class UserStory(BaseModel):
    """One story: what to build, how to tell it is done, and where the loop is with it."""

    model_config = _CONFIG

    id: str = Field(pattern=STORY_ID_PATTERN)
    title: Annotated[
        str, StringConstraints(min_length=1, max_length=MAX_TITLE_CHARS), AfterValidator(_single_line)
    ]
    description: Description = ""
    acceptance_criteria: list[Criterion] = Field(default_factory=list, max_length=MAX_CRITERIA)
    #: Lower runs first (file order breaks ties).
    priority: int = Field(default=1, ge=0, le=MAX_PRIORITY)
    passes: bool = False
    #: Sticky: set before the provider runs, cleared only when the story passes (or is reset),
    #: so a loop that dies mid-story picks the same story up again.
    in_progress: bool = False
    notes: Annotated[str, StringConstraints(max_length=MAX_NOTES_CHARS), AfterValidator(_plain_text)] = ""
    attempts: int = Field(default=0, ge=0, le=MAX_ATTEMPTS)

    @model_validator(mode="after")
    def _one_state(self) -> UserStory:
        if self.passes and self.in_progress:
            raise _problem("inProgress", "a story cannot be both passes and inProgress")
        return self


class Prd(BaseModel):
    """The whole document (``prd.json``)."""

    model_config = _CONFIG

    version: int = Field(default=1, strict=True)
    name: str = Field(pattern=NAME_PATTERN)
    title: Title = ""
    description: Annotated[
        str, StringConstraints(max_length=MAX_PRD_DESCRIPTION_CHARS), AfterValidator(_plain_text)
    ] = ""
    #: The branch the loop works on (``RunPrd.branch`` wins); empty: the current branch.
    branch_name: Annotated[str, StringConstraints(max_length=MAX_BRANCH_CHARS)] = ""
    user_stories: list[UserStory] = Field(default_factory=list, max_length=MAX_STORIES)

    @model_validator(mode="before")
    @classmethod
    def _version_first(cls, data: Any) -> Any:
        # checked before the fields so a file of a future version says so, not "unknown key"
        if isinstance(data, dict) and "version" in data:
            version = data["version"]
            if type(version) is not int or version != 1:
                raise _problem("version", f"version must be 1 (this build reads version 1), got {version!r}")
        return data

    @field_validator("branch_name")
    @classmethod
    def _branch(cls, value: str) -> str:
        # the file is project input (and the agent works next to it): refuse what git would read as
        # an option or a revision expression before any git command sees it
        if value and not _branch_ok(value):
            raise ValueError(
                "not a usable branch name (letters, digits, '.', '_', '-', '/'; not starting with "
                "'-' or '/', no '..' or '//', not ending with '/', '.' or '.lock')"
            )
        return value

    @model_validator(mode="after")
    def _consistent(self) -> Prd:
        seen: dict[str, int] = {}
        running: list[int] = []
        for index, story in enumerate(self.user_stories):
            if story.id in seen:
                raise _problem(
                    f"userStories[{index}].id",
                    f"story id {story.id!r} appears more than once (also userStories[{seen[story.id]}])",
                )
            seen[story.id] = index
            if story.in_progress:
                running.append(index)
        if len(running) > 1:
            ids = ", ".join(self.user_stories[i].id for i in running)
            raise _problem(
                f"userStories[{running[1]}].inProgress", f"at most one story can be inProgress, found {ids}"
            )
        return self

    def story(self, story_id: str) -> UserStory | None:
        """The story of that id, or ``None``."""
        return next((s for s in self.user_stories if s.id == story_id), None)

    def to_json_dict(self) -> dict[str, Any]:
        """The document as ``prd.json`` holds it (camelCase keys)."""
        return self.model_dump(mode="json", by_alias=True)


def error_path(loc: tuple[int | str, ...]) -> str:
    """A location as the file spells it: ``("userStories", 1, "title")`` is ``userStories[1].title``."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out


def validation_problems(exc: ValidationError) -> list[dict[str, str]]:
    """``[{"field": "userStories[1].title", "problem": "…"}]``, one per error, in file spelling."""
    problems = []
    for err in exc.errors(include_url=False):
        where = error_path(tuple(err["loc"]))
        extra = (err.get("ctx") or {}).get("field")
        if isinstance(extra, str) and extra:
            where = f"{where}.{extra}" if where and not extra.startswith("[") else f"{where}{extra}"
        message = str(err["msg"]).removeprefix("Value error, ")
        problems.append({"field": where or "(document)", "problem": message})
    return problems


def parse_prd_data(data: Any, *, source: str = "prd.json") -> Prd:
    """``data`` (a decoded ``prd.json``: camelCase keys only) as a :class:`Prd`, or
    ``InvalidInput`` "``<source>: userStories[1].title: <problem>``" naming the first problem
    (``details.errors`` lists up to 20)."""
    if not isinstance(data, dict):
        raise InvalidInput(f"{source}: the top level must be a JSON object", details={"file": source})
    try:
        # by alias only: the file's keys are camelCase; a snake_case key there is a typo
        return Prd.model_validate(data, by_alias=True, by_name=False)
    except ValidationError as exc:
        problems = validation_problems(exc)
        first = problems[0]
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise InvalidInput(
            f"{source}: {first['field']}: {first['problem']}{more}",
            details={"file": source, "field": first["field"], "errors": problems[:20]},
        ) from None


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
