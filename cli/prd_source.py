"""What ``jidocode prd new --from`` and ``prd import`` read (a stories file or a Ralph ``prd.json``),
and the creation of a PRD from it (``new``, ``import``, ``draft``).

A stories file is a JSON list of ``{title, description, acceptance_criteria, priority}`` (or
``{"stories": [...]}``); a Ralph document (``project``, ``branchName``, ``userStories`` …,
:mod:`jidocode.services.prd.ralph`) brings its title, description and branch too, and each
story keeps its id, ``passes`` and notes. Everything is checked here, before any connection:
a bad file is :class:`InvalidInput` naming the file and the field.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from pydantic import TypeAdapter, ValidationError
from rich.text import Text

from jidocode.shared.clients import PrdClient
from jidocode.shared.errors import InvalidInput
from jidocode.shared.events.prd import PrdView, StoryDraft

from .common import cli_bus, console, fields, print_json, resolve_project
from .prd_render import safe, story_rows

if TYPE_CHECKING:
    from jidocode.services.prd.model import Prd

__all__ = [
    "MAX_STORIES_FILE_BYTES",
    "PrdSource",
    "create_prd",
    "drafts_of",
    "print_created",
    "read_json",
    "read_source",
    "stories_of",
]

#: The largest ``--from`` file read (500 stories of 20 000 characters fit comfortably).
MAX_STORIES_FILE_BYTES: Final = 8 * 1024 * 1024
_DRAFTS: Final = TypeAdapter(list[StoryDraft])


@dataclass(frozen=True)
class PrdSource:
    """A PRD to create, as read from a file (empty strings: the file does not say)."""

    stories: list[StoryDraft] = field(default_factory=list)
    name: str = ""
    title: str = ""
    description: str = ""
    branch_name: str = ""
    #: Read from a Ralph document.
    ralph: bool = False


def read_json(path: str, what: str = "stories file") -> Any:
    """The decoded JSON of ``path`` (at most :data:`MAX_STORIES_FILE_BYTES`), or ``InvalidInput``."""
    file = Path(path).expanduser()
    try:
        size = file.stat().st_size
    except OSError as exc:
        raise InvalidInput(f"cannot read the {what} {path}: {exc.strerror}", details={"path": path}) from None
    if size > MAX_STORIES_FILE_BYTES:
        raise InvalidInput(
            f"the {what} {path} has {size} bytes: at most {MAX_STORIES_FILE_BYTES} are read",
            details={"path": path},
        )
    try:
        return json.loads(file.read_text(encoding="utf-8"))
    except (ValueError, OSError) as exc:
        raise InvalidInput(f"the {what} {path} is not JSON: {exc}", details={"path": path}) from None


def stories_of(data: Any, path: str) -> list[StoryDraft]:
    """The stories of a decoded stories file (a list, or ``{"stories": [...]}``)."""
    if isinstance(data, dict) and isinstance(data.get("stories"), list):
        data = data["stories"]
    if not isinstance(data, list):
        raise InvalidInput(
            f"the stories file {path} must hold a JSON list of stories, got {type(data).__name__} "
            "(or be a Ralph prd.json, an object with userStories)",
            details={"path": path},
        )
    try:
        return _DRAFTS.validate_python(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise InvalidInput(
            f"story {where} in {path}: {first['msg']}", details={"path": path, "field": where}
        ) from None


def drafts_of(prd: Prd) -> list[StoryDraft]:
    """``prd``'s stories as ``create`` takes them (ids, ``passes`` and notes kept)."""
    return [
        StoryDraft(
            id=s.id,
            title=s.title,
            description=s.description,
            acceptance_criteria=list(s.acceptance_criteria),
            priority=s.priority,
            passes=s.passes,
            notes=s.notes,
        )
        for s in prd.user_stories
    ]


def read_source(path: str, *, name: str = "") -> PrdSource:
    """What ``path`` holds: a Ralph document (:func:`~jidocode.services.prd.ralph.is_ralph`) with
    its title, description, branch and a name (``name``, else one made of its ``branchName`` or
    ``project``), or a plain stories file (no name)."""
    data = read_json(path)
    from jidocode.services.prd import ralph  # the PRD models load only for this

    if not ralph.is_ralph(data):
        return PrdSource(stories=stories_of(data, path), name=name)
    try:
        prd = ralph.from_ralph(data, name=name)
    except InvalidInput as exc:
        raise InvalidInput(f"{path}: {exc.message}", details={**exc.details, "path": path}) from None
    return PrdSource(
        stories=drafts_of(prd),
        name=prd.name,
        title=prd.title,
        description=prd.description,
        branch_name=prd.branch_name,
        ralph=True,
    )


async def create_prd(project_dir: str, name: str, source: PrdSource) -> PrdView:
    """Create PRD ``name`` of the project at ``project_dir`` from ``source``."""
    async with cli_bus("prd") as bus:
        info = await resolve_project(bus, project_dir)
        return await PrdClient(bus, info.project_id, timeout=30).create(
            name,
            title=source.title,
            description=source.description,
            branch_name=source.branch_name,
            stories=source.stories,
        )


def print_created(view: PrdView, json_out: bool) -> None:
    """``created <name> with <n> stories (<k> passed) in <path>``, or the view as JSON."""
    if json_out:
        print_json(fields(view))
        return
    rows = story_rows(view.prd)
    passed = sum(r.state == "passed" for r in rows)
    already = f" ({passed} passed)" if passed else ""
    console.print(
        Text.assemble(
            "created ", (view.name, "bold"), safe(f" with {len(rows)} stories{already} in {view.path}")
        )
    )
