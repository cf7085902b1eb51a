"""The conversation recording: its file format, reading it back, and exporting one.

A recording is JSON lines, the first a header (the format is in :mod:`.replay`'s docstring and
docs/compaction-and-replay.md); :func:`read_recording` checks every line and names the first bad
one. :func:`answers_of` and :func:`reply_of` turn the journal's model results into what the
replay's loopback model server answers.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from jidocode.shared.clients import ConversationsClient
from jidocode.shared.envelope import now_iso
from jidocode.shared.errors import InvalidInput, JidoError
from jidocode.shared.events.conversation import (
    CompactionCompleted,
    CompactionFailed,
    LlmCompleted,
    LlmFailed,
)
from jidocode.shared.nofollow import open_dir, replace_bytes

from .dev.scripted_llm import Reply, ScriptedToolCall

__all__ = [
    "FORMAT",
    "LIVE_PROJECTIONS",
    "MAX_LINE_BYTES",
    "VERSION",
    "Answer",
    "Recording",
    "RecordingHeader",
    "answers_of",
    "export_recording",
    "read_recording",
    "reply_of",
    "write_recording",
]

FORMAT: Final = "jidocode.conversation-recording"
VERSION: Final = 1
#: The projections recorded and compared (the journal-backed ``canonical_*`` ones are the same data).
LIVE_PROJECTIONS: Final = (
    "timeline",
    "llm_context",
    "diagnostics",
    "subagent_status",
    "pending_tool_calls",
    "usage",
)
#: Settings that shape the projections, copied from the recorded conversation's diagnostics.
_LIMIT_SETTINGS: Final = ("max_turns", "compact_at", "compact_keep_turns")
#: A recording line may hold one large tool result, never more than this.
MAX_LINE_BYTES: Final = 64 * 1024 * 1024  # characters


class RecordingHeader(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: Literal["header"] = "header"
    format: Literal["jidocode.conversation-recording"] = FORMAT
    version: Literal[1] = VERSION
    project_id: str = Field(min_length=1)
    conversation_id: str = Field(min_length=1)
    root_path: str = ""
    trusted: bool = False
    #: Conversation settings the replay starts with (limits, context window, tool exposure).
    settings: dict[str, Any] = Field(default_factory=dict)
    entries: int = Field(ge=0)
    answers: int = Field(ge=0)
    exported_at: str = ""


class Answer(BaseModel):
    """One model call's recorded outcome, in call order (a summary call is one too)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: Literal["answer"] = "answer"
    request_id: str
    status: Literal["completed", "failed"]
    content: str = ""
    tool_calls: list[dict[str, Any]] = Field(default_factory=list)
    model: str = ""
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cached_tokens: int = 0
    error_type: str | None = None
    message: str = ""


class Recording(BaseModel):
    model_config = ConfigDict(frozen=True)

    header: RecordingHeader
    entries: list[dict[str, Any]]
    answers: list[Answer]
    projections: dict[str, Any]


# -- the file ---------------------------------------------------------------------------------


def answers_of(entries: Iterable[dict[str, Any]]) -> list[Answer]:
    """The model's answers in the journal, in call order: every LLM and summary result."""
    out: list[Answer] = []
    for entry in entries:
        t, d = entry.get("type"), entry.get("data") or {}
        if t in (LlmCompleted.TYPE, CompactionCompleted.TYPE):
            usage = d.get("usage") or {}
            out.append(
                Answer(
                    request_id=str(d.get("request_id")),
                    status="completed",
                    content=str(d.get("content") if t == LlmCompleted.TYPE else d.get("summary") or ""),
                    tool_calls=list(d.get("tool_calls") or []),
                    model=str(d.get("model") or ""),
                    prompt_tokens=usage.get("prompt_tokens"),
                    completion_tokens=usage.get("completion_tokens"),
                    cached_tokens=int(usage.get("cached_tokens") or 0),
                )
            )
        elif t in (LlmFailed.TYPE, CompactionFailed.TYPE):
            out.append(
                Answer(
                    request_id=str(d.get("request_id")),
                    status="failed",
                    error_type=str(d.get("error_type") or "llm_error"),
                    message=str(d.get("message") or ""),
                )
            )
    return out


#: The HTTP error that litellm maps back onto each recorded failure (the replay sends no retries).
_ERRORS: Final = {
    "llm_auth": 401,
    "llm_unknown_model": 404,
    "llm_rate_limited": 429,
    "llm_unavailable": 503,
    "llm_bad_request": 400,
}


def _arguments(value: object) -> dict[str, Any]:
    return dict(value) if isinstance(value, dict) else {}


def reply_of(answer: Answer) -> Reply:
    """What the loopback model server sends for a recorded answer."""
    if answer.status == "failed":
        if answer.error_type == "llm_context_overflow":
            return Reply.context_overflow()
        return Reply.error(_ERRORS.get(answer.error_type or "", 500), answer.message or None)
    calls = tuple(
        ScriptedToolCall(
            id=str(call.get("id") or f"call_{i}"),
            name=str(call.get("name") or ""),
            arguments=_arguments(call.get("arguments")),
        )
        for i, call in enumerate(answer.tool_calls)
    )
    return Reply(
        kind="tool_calls" if calls else "text",
        text=answer.content,
        tool_calls=calls,
        model=answer.model or None,
        prompt_tokens=answer.prompt_tokens,
        completion_tokens=answer.completion_tokens,
        cached_tokens=answer.cached_tokens,
    )


def write_recording(path: Path, recording: Recording) -> None:
    lines = [recording.header.model_dump_json()]
    lines += [
        json.dumps({"kind": "entry", "entry": e}, ensure_ascii=False, sort_keys=True)
        for e in recording.entries
    ]
    lines += [a.model_dump_json() for a in recording.answers]
    lines += [
        json.dumps({"kind": "projection", "name": name, "value": value}, ensure_ascii=False, sort_keys=True)
        for name, value in recording.projections.items()
    ]
    # replaced at once, never through a link: the default target is in the working directory,
    # often a project where a model could have planted one (decision 0301)
    with open_dir(path.parent, ()) as dfd:
        replace_bytes(dfd, path.name, ("\n".join(lines) + "\n").encode("utf-8"), shown=path)


def read_recording(path: Path) -> Recording:
    """Read and check a recording; a bad file is ``InvalidInput`` naming the line and what is wrong."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise InvalidInput(f"cannot read the recording {path}: {exc}", details={"path": str(path)}) from None
    parts = _RecordingParts()
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        where = f"{path}:{number}"
        item = _line_json(line, where, number)
        try:
            parts.add(item, where)
        except ValidationError as exc:
            problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
            raise InvalidInput(f"{where}: {problems}", details={"line": number}) from None
    return parts.recording(path)


def _line_json(line: str, where: str, number: int) -> Any:
    """One recording line's JSON value (a line over :data:`MAX_LINE_BYTES` is refused unread)."""
    if len(line) > MAX_LINE_BYTES:
        raise InvalidInput(f"{where}: a line of {len(line)} characters is over {MAX_LINE_BYTES}")
    try:
        return json.loads(line)
    except json.JSONDecodeError as exc:
        raise InvalidInput(f"{where}: not JSON ({exc.msg})", details={"line": number}) from None


def _header_of(item: Any, where: str) -> RecordingHeader:
    """The header line, checked: its kind, format and version first, then its fields."""
    kind = item.get("kind") if isinstance(item, dict) else None
    if kind != "header":
        raise InvalidInput(f"{where}: a recording starts with its header line, not {kind!r}")
    if item.get("format") != FORMAT:
        raise InvalidInput(f"{where}: not a conversation recording (format {item.get('format')!r})")
    if item.get("version") != VERSION:
        raise InvalidInput(
            f"{where}: recording version {item.get('version')!r}; this jidocode reads version {VERSION}"
        )
    return RecordingHeader.model_validate(item)


class _RecordingParts:
    """A recording's lines as they are read: the header first, then entries, answers and
    projections in any order."""

    def __init__(self) -> None:
        self.header: RecordingHeader | None = None
        self.entries: list[dict[str, Any]] = []
        self.answers: list[Answer] = []
        self.projections: dict[str, Any] = {}

    def add(self, item: Any, where: str) -> None:
        """Take one line's value; an unknown or misplaced line is ``InvalidInput`` (``where`` it is)."""
        if self.header is None:
            self.header = _header_of(item, where)
            return
        kind = item.get("kind") if isinstance(item, dict) else None
        if kind == "entry" and isinstance(item.get("entry"), dict):
            self.entries.append(item["entry"])
        elif kind == "answer":
            self.answers.append(Answer.model_validate(item))
        elif kind == "projection" and isinstance(item.get("name"), str):
            self.projections[item["name"]] = item.get("value")
        else:
            raise InvalidInput(f"{where}: unknown line kind {kind!r} (header, entry, answer, projection)")

    def recording(self, path: Path) -> Recording:
        """The whole recording, once its counts match the header's (a cut file does not)."""
        header = self.header
        if header is None:
            raise InvalidInput(f"{path}: empty recording (no header line)")
        if len(self.entries) != header.entries or len(self.answers) != header.answers:
            raise InvalidInput(
                f"{path}: the header announces {header.entries} entries and {header.answers} answers, "
                f"the file holds {len(self.entries)} and {len(self.answers)} (a cut file?)"
            )
        return Recording(
            header=header, entries=self.entries, answers=self.answers, projections=self.projections
        )


async def export_recording(
    client: ConversationsClient, conversation_id: str, *, root_path: str = "", trusted: bool = False
) -> Recording:
    """Read a conversation's journal and live projections through the conversation service."""
    journal = (await client.get_projection(conversation_id, "canonical_timeline")).value
    if not isinstance(journal, list):
        raise JidoError(
            f"no journal for conversation {conversation_id!r}", details={"conversation_id": conversation_id}
        )
    projections = {
        name: (await client.get_projection(conversation_id, name)).value for name in LIVE_PROJECTIONS
    }
    answers = answers_of(journal)
    diagnostics = projections.get("diagnostics") or {}
    settings: dict[str, Any] = {k: diagnostics[k] for k in _LIMIT_SETTINGS if k in diagnostics}
    windows = [
        e["data"]["context_window"]
        for e in journal
        if e.get("type") == LlmCompleted.TYPE and (e.get("data") or {}).get("context_window")
    ]
    if windows:
        settings["context_window"] = windows[-1]
    header = RecordingHeader(
        project_id=client.project_id,
        conversation_id=conversation_id,
        root_path=root_path,
        trusted=trusted,
        settings=settings,
        entries=len(journal),
        answers=len(answers),
        exported_at=now_iso(),
    )
    return Recording(header=header, entries=journal, answers=answers, projections=projections)
