"""What an A2A task looks like, read from its conversation (pure: no I/O, no SDK).

A task *is* a conversation (decision 0225): the task id, the context id and the
conversation id are one string. Its state is a fold over the conversation's
``timeline`` projection, so any gateway replica answers ``GetTask`` the same way:

=================  ===========================================================
``submitted``      no user message yet
``working``        the last user message's turn is running
``input-required`` a tool call waits for an approval (``ask`` rule) nobody gave
``completed``      the turn ended with an answer (``answer`` is its text)
``failed``         the turn ended failed or stopped, or the task's first message was
                   refused (too large, queue full)
``canceled``       the turn was cancelled
=================  ===========================================================

The conversation says when a turn ends: one :class:`TurnEnded` per turn (decision 0317),
naming the user messages it answered; the view takes the one naming the last user message.

:class:`TurnFollower` is the live side of the same rules: it takes the
conversation's output events one at a time (those of the ``timeline`` plus the
unjournaled :class:`AssistantDelta`) and says what the A2A stream must show.

Approval answers (:func:`parse_decision`): the client's next message on an
``input-required`` task is the answer, as text (``allow``, ``allow always``,
``deny`` and their synonyms) or as a data part ``{"decision": …, "request_id"?: …}``. A
question with a form (an MCP server's elicitation) carries it in its data part; the answer's
``{"content": {…}}`` fills it (:func:`parse_content`, checked against the form).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field

from jidocode.shared.errors import InvalidInput
from jidocode.shared.events.conversation import (
    ApprovalDecision,
    ApprovalRequested,
    ApprovalResponse,
    AssistantDelta,
    AssistantMessage,
    Cancel,
    ConversationError,
    QueueOverflow,
    ToolCallCompleted,
    ToolCallFailed,
    TurnEnded,
    UserMessage,
)
from jidocode.shared.forms import check_content

__all__ = [
    "ANSWERS",
    "AnswerError",
    "Asked",
    "Delta",
    "Ended",
    "PendingApproval",
    "State",
    "TaskView",
    "TurnFollower",
    "Update",
    "Utterance",
    "fold",
    "parse_content",
    "parse_decision",
]

State = Literal["submitted", "working", "input-required", "completed", "failed", "canceled"]

#: Accepted answers to an approval, as text (case and surrounding space ignored).
ANSWERS: Final[Mapping[str, ApprovalDecision]] = {
    "allow": "approve_once",
    "approve": "approve_once",
    "yes": "approve_once",
    "y": "approve_once",
    "ok": "approve_once",
    "approve_once": "approve_once",
    "allow always": "approve_session",
    "always": "approve_session",
    "approve_session": "approve_session",
    "deny": "deny",
    "no": "deny",
    "n": "deny",
    "reject": "deny",
}

_DECISIONS: Final = frozenset({"approve_once", "approve_session", "deny"})
#: ``{"decision": "allow"}`` in a data part means the same as the text ``allow``.
_DATA_DECISIONS: Final[Mapping[str, ApprovalDecision]] = {
    **ANSWERS,
    **{d: d for d in ("approve_once", "approve_session", "deny")},  # type: ignore[misc]
}


class AnswerError(ValueError):
    """The message on an ``input-required`` task is no approval answer; the text says why."""


class PendingApproval(BaseModel):
    """One tool call waiting for an approval."""

    model_config = ConfigDict(frozen=True)

    request_id: str
    tool: str
    args: dict[str, Any] = Field(default_factory=dict)
    reason: str = ""
    correlation_id: str | None = None
    #: The form an answer fills (an MCP server's elicitation; ``jidocode.shared.forms``).
    form: dict[str, Any] | None = None

    def question(self) -> str:
        """What the A2A client is asked, in words."""
        why = f" ({self.reason})" if self.reason else ""
        if self.form is not None:
            return (
                f"{self.tool} asks you to fill a form{why}. Answer with a data part "
                '{"decision": "allow", "content": {…}} giving the form\'s fields, or \'deny\'.'
            )
        return (
            f"The agent wants to run {self.tool} with {self.args}{why}. "
            "Answer 'allow', 'allow always' or 'deny'."
        )


class Utterance(BaseModel):
    """One message of the task's history."""

    model_config = ConfigDict(frozen=True)

    id: str
    role: Literal["user", "agent"]
    text: str


class TaskView(BaseModel):
    """The task as the timeline shows it."""

    model_config = ConfigDict(frozen=True)

    state: State = "submitted"
    #: The final answer of the last turn (``completed``).
    answer: str | None = None
    #: Why the task failed or was cancelled.
    reason: str = ""
    #: Oldest first.
    pending: tuple[PendingApproval, ...] = ()
    history: tuple[Utterance, ...] = ()


def _text(data: Mapping[str, Any], key: str) -> str:
    value = data.get(key)
    return value if isinstance(value, str) else ""


def _ending(ended: TurnEnded) -> tuple[Literal["completed", "failed", "canceled"], str]:
    """The A2A end of a turn: its state, and the answer (``completed``) or the reason."""
    match ended.outcome:
        case "completed":
            return "completed", ended.text
        case "cancelled":
            return "canceled", ended.message or "cancelled"
        case "stopped":
            return "failed", f"the loop stopped ({ended.error_type or 'stopped'})"
        case _:
            return "failed", ended.message or ended.error_type or "failed"


def _turn_end(data: Mapping[str, Any], last_user: str | None) -> tuple[State, str | None, str] | None:
    """The state, answer and reason a :class:`TurnEnded` gives the task, if it ends the turn of
    the task's last user message."""
    ended = TurnEnded.read(data)
    if ended is None or not ended.ends(last_user):
        return None
    state, said = _ending(ended)
    return (state, said, "") if state == "completed" else (state, None, said)


def fold(entries: Iterable[Mapping[str, Any]]) -> TaskView:
    """The view of a task from its conversation's timeline entries (``{id, type, data, …}``)."""
    state: State = "submitted"
    answer: str | None = None
    reason = ""
    pending: dict[str, PendingApproval] = {}
    history: list[Utterance] = []
    last_user: str | None = None
    for entry in entries:
        kind = entry.get("type")
        raw = entry.get("data")
        data: Mapping[str, Any] = raw if isinstance(raw, Mapping) else {}
        eid = str(entry.get("id") or "")
        if kind == UserMessage.TYPE:
            state, answer, reason, last_user = "working", None, "", eid
            history.append(Utterance(id=eid, role="user", text=_text(data, "text")))
        elif kind == AssistantMessage.TYPE:
            history.append(Utterance(id=eid, role="agent", text=_text(data, "text")))
        elif kind == TurnEnded.TYPE:
            end = _turn_end(data, last_user)
            if end is not None:
                state, answer, reason = end
        elif kind == Cancel.TYPE:  # before its turn's end: no approval waits any more
            pending.clear()
        elif kind == ApprovalRequested.TYPE:
            asked = _pending_of(data, str(entry.get("correlation_id") or "") or None)
            pending[asked.request_id] = asked
        elif kind in (ApprovalResponse.TYPE, ToolCallCompleted.TYPE, ToolCallFailed.TYPE):
            pending.pop(_text(data, "request_id"), None)
        elif state == "submitted" and _refused(kind, data) is not None:
            state, reason = "failed", _refusal(data)
    if pending and state == "working":
        state = "input-required"
    elif state == "input-required" and not pending:
        state = "working"
    return TaskView(
        state=state, answer=answer, reason=reason, pending=tuple(pending.values()), history=tuple(history)
    )


def _pending_of(data: Mapping[str, Any], correlation_id: str | None = None) -> PendingApproval:
    """The approval an ``approval.requested`` event asks (its form too, when it carries one)."""
    args, form = data.get("args"), data.get("form")
    return PendingApproval(
        request_id=_text(data, "request_id"),
        tool=_text(data, "tool"),
        args=dict(args) if isinstance(args, Mapping) else {},
        reason=_text(data, "reason"),
        correlation_id=correlation_id,
        form=dict(form) if isinstance(form, Mapping) else None,
    )


def _refused(kind: object, data: Mapping[str, Any]) -> str | None:
    """The id of the input the conversation refused (rejected or dropped), if this entry says so."""
    if kind == ConversationError.TYPE:
        details = data.get("details")
        rejected = details.get("rejected_id") if isinstance(details, Mapping) else None
        return str(rejected) if rejected else None
    if kind == QueueOverflow.TYPE:
        return _text(data, "dropped_id") or None
    return None


def _refusal(data: Mapping[str, Any]) -> str:
    if "dropped_id" in data:
        return "the conversation's queue was full: the message was dropped"
    return f"the conversation refused the message: {_text(data, 'message') or _text(data, 'error_type')}"


def parse_content(
    datas: Sequence[Any], approval: PendingApproval, decision: ApprovalDecision
) -> dict[str, Any] | None:
    """The values a data part ``{"content": {…}}`` gives ``approval``'s form (an approve only),
    checked against it; :class:`AnswerError` naming the field that does not fit."""
    found = [d["content"] for d in datas if isinstance(d, Mapping) and d.get("content") is not None]
    if not found or decision == "deny":
        return None
    if approval.form is None:
        raise AnswerError(f"approval {approval.request_id!r} asks no form: its answer carries no content")
    try:
        return check_content(approval.form, found[0])
    except InvalidInput as exc:
        raise AnswerError(exc.message) from None


def parse_decision(
    texts: Sequence[str], datas: Sequence[Any], pending: Sequence[PendingApproval]
) -> tuple[PendingApproval, ApprovalDecision]:
    """Which pending approval the message answers, and how.

    A data part ``{"decision": …}`` wins over text; its ``request_id`` picks the
    approval (default: the oldest). Raises :class:`AnswerError` naming what was wrong.
    """
    if not pending:
        raise AnswerError("no approval is waiting for an answer")
    for data in datas:
        if isinstance(data, Mapping) and "decision" in data:
            word = str(data["decision"]).strip().lower()
            decision = _DATA_DECISIONS.get(word)
            if decision is None:
                raise AnswerError(
                    f"unknown decision {word!r}: expected one of {', '.join(sorted(_DECISIONS))}"
                )
            wanted = data.get("request_id")
            if wanted is None:
                return pending[0], decision
            for item in pending:
                if item.request_id == wanted:
                    return item, decision
            raise AnswerError(
                f"no approval {wanted!r} is waiting (waiting: {[p.request_id for p in pending]})"
            )
    said = " ".join(t.strip() for t in texts).strip().lower().rstrip(".!")
    decision = ANSWERS.get(said)
    if decision is None:
        shown = said if len(said) <= 40 else said[:40] + "…"
        raise AnswerError(f"{shown!r} is no answer to the approval: say 'allow', 'allow always' or 'deny'")
    return pending[0], decision


# -- the live side --------------------------------------------------------------


@dataclass(frozen=True)
class Delta:
    text: str


@dataclass(frozen=True)
class Asked:
    approval: PendingApproval


@dataclass(frozen=True)
class Ended:
    state: Literal["completed", "failed", "canceled"]
    text: str = ""


Update = Delta | Asked | Ended


@dataclass
class TurnFollower:
    """Follows one turn from the conversation's live output.

    ``message_id`` is the user message that opens the turn: events before its
    echo belong to someone else and are skipped. ``None`` follows a turn that
    is already running (the answer to an approval continues it).
    """

    message_id: str | None = None
    started: bool = False
    done: bool = False

    def __post_init__(self) -> None:
        if self.message_id is None:
            self.started = True

    def feed(self, kind: str, data: Mapping[str, Any], *, event_id: str) -> list[Update]:
        """What one output event means for the A2A stream (nothing once the turn has ended)."""
        if self.done:
            return []
        if not self.started:
            if kind == UserMessage.TYPE and event_id == self.message_id:
                self.started = True
            elif _refused(kind, data) == self.message_id:
                return [self._end("failed", _refusal(data))]
            return []
        out: list[Update] = []
        if kind == AssistantDelta.TYPE:
            text = _text(data, "text")
            if text:
                out.append(Delta(text))
        elif kind == TurnEnded.TYPE:
            ended = TurnEnded.read(data)
            if ended is not None and (self.message_id is None or ended.ends(self.message_id)):
                out.append(self._end(*_ending(ended)))
        elif kind == ApprovalRequested.TYPE:
            out.append(Asked(_pending_of(data)))
        return out

    def _end(self, state: Literal["completed", "failed", "canceled"], text: str) -> Ended:
        self.done = True
        return Ended(state, text)
