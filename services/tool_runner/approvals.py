"""The approval gate: a call the policy answers with ``ask`` runs only once a human approves it.

The gate publishes ``conversation.approval.requested`` on the conversation's
output and waits (``approval_timeout_s``) for a ``conversation.approval.response``
with the call's request id on the conversation's input. ``approve_once`` lets
this call through; ``approve_session`` also lets through every later call of
the same :func:`approval_key` in that conversation (remembered per replica,
bounded); ``deny``, no answer in time, or no conversation to ask refuse the
call; a cancel stops the wait.

**Who may answer.** The answer is read from the conversation's input subject,
which on a system with NATS users (``jidocode up``, ``jidocode deploy``) only
the ``client`` user and the conversation service may publish — the tool
runner, the other services and a tool's process (which holds no credential)
cannot. So an answer there is the conversation owner's (decision 0140).

**Waiting costs no request slot.** The wait runs inside ``release()`` (the
service host's :meth:`~jidocode.shared.service.ServiceHost.released`), so calls
waiting for a human never fill the replica's request slots; what bounds them
instead is :data:`MAX_PENDING_PER_PROJECT` waits per project
(``JIDO_MAX_PENDING_APPROVALS``), past which a call is refused with
``quota_exceeded`` (retryable) before it asks.

The rules (:func:`refuse_denied`, :func:`conversation_to_ask`, :func:`approval_key`,
:func:`judge`, :class:`SessionApprovals`) are pure; :class:`ApprovalGate` does the I/O.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
from collections import OrderedDict
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from typing import Any, Final, NamedTuple

import nats.errors
from nats.aio.subscription import Subscription

from jidocode.shared import subjects
from jidocode.shared.bus import Bus
from jidocode.shared.envelope import Envelope
from jidocode.shared.errors import PermissionDenied
from jidocode.shared.events.conversation import ApprovalRequested, ApprovalResponse
from jidocode.shared.policy import Decision, Effect

from .call import Call, CallKey
from .errors import CallCancelled, QuotaExceeded
from .telemetry import approval_wait

__all__ = [
    "MAX_APPROVAL_CONVERSATIONS",
    "MAX_PENDING_PER_PROJECT",
    "MAX_SESSION_APPROVALS",
    "ApprovalGate",
    "Reply",
    "SessionApprovals",
    "approval_key",
    "conversation_to_ask",
    "judge",
    "refuse_denied",
]

log = logging.getLogger("jidocode.tool_runner")

#: ``approve_session`` memory bounds (a forgotten approval is simply asked again).
MAX_SESSION_APPROVALS: Final = 256
MAX_APPROVAL_CONVERSATIONS: Final = 4096
#: Calls of one project waiting for an answer at once, per replica (``JIDO_MAX_PENDING_APPROVALS``).
MAX_PENDING_PER_PROJECT: Final = 512

#: Answers of the wait besides the human's :data:`ApprovalDecision`.
TIMEOUT: Final = "timeout"
CANCELLED: Final = "cancelled"
NO_CONVERSATION: Final = "no_conversation"


class Reply(NamedTuple):
    """What came back to a question: the decision (or :data:`TIMEOUT`, :data:`CANCELLED`,
    :data:`NO_CONVERSATION`) and the content the answer gave its form, if any (unchecked)."""

    decision: str
    content: dict[str, Any] | None = None


def _details(decision: Decision) -> dict[str, Any]:
    return {"decision": decision.effect.value, "rule": decision.rule, **decision.details}


def refuse_denied(decision: Decision) -> Decision:
    """``decision`` unless the policy denies the call (then :class:`PermissionDenied`)."""
    if decision.effect is Effect.DENY:
        raise PermissionDenied(decision.reason, details=_details(decision))
    return decision


def conversation_to_ask(decision: Decision, conversation_id: str | None) -> str | None:
    """The conversation to ask about an ``ask`` call; ``None`` when the call is allowed outright.

    A denied call, or an ``ask`` without a conversation, is :class:`PermissionDenied`.
    """
    if refuse_denied(decision).effect is Effect.ALLOW:
        return None
    if conversation_id is None:
        raise PermissionDenied(
            f"needs approval, but the call has no conversation to ask: {decision.reason}",
            details=_details(decision),
        )
    return conversation_id


def approval_key(name: str, args: dict[str, Any], decision: Decision) -> str:
    """What ``approve_session`` remembers: the exact command, the resolved path, or the tool."""
    if name == "bash":
        return f"bash\0{args.get('command')}"
    if decision.path is not None:
        return f"{name}\0{decision.path}"
    return f"{name}\0{json.dumps(args, sort_keys=True, default=str)}"


def judge(answer: str, decision: Decision, timeout_s: float) -> bool:
    """Whether ``answer`` approves for the whole session (``True``) or this call only (``False``).

    Any other answer refuses the call: :class:`CallCancelled` for a cancel,
    :class:`PermissionDenied` for a denial or no answer in time (the policy's reason then says
    which rule would let the call through without asking).
    """
    if answer == CANCELLED:
        raise CallCancelled("the call was cancelled while waiting for approval")
    if answer in ("approve_once", "approve_session"):
        return answer == "approve_session"
    raise PermissionDenied(
        "the user denied the call"
        if answer == "deny"
        else f"no approval within {timeout_s:g} s, nobody answered: {decision.reason}",
        details={**_details(decision), "approval": answer},
    )


class SessionApprovals:
    """``approve_session`` answers per conversation, bounded: the oldest are forgotten."""

    def __init__(
        self,
        *,
        per_conversation: int = MAX_SESSION_APPROVALS,
        conversations: int = MAX_APPROVAL_CONVERSATIONS,
    ) -> None:
        self.per_conversation = per_conversation
        self.conversations = conversations
        self._keys: OrderedDict[tuple[str, str], set[str]] = OrderedDict()

    def grants(self, project_id: str, conversation_id: str, key: str) -> bool:
        return key in self._keys.get((project_id, conversation_id), ())

    def remember(self, project_id: str, conversation_id: str, key: str) -> None:
        keys = self._keys.setdefault((project_id, conversation_id), set())
        self._keys.move_to_end((project_id, conversation_id))
        if len(keys) < self.per_conversation:
            keys.add(key)
        while len(self._keys) > self.conversations:
            self._keys.popitem(last=False)


def pending_limit(environ: dict[str, str] | None = None) -> int:
    """``JIDO_MAX_PENDING_APPROVALS`` (1 … 100000), else :data:`MAX_PENDING_PER_PROJECT`."""
    raw = (os.environ if environ is None else environ).get("JIDO_MAX_PENDING_APPROVALS")
    if not raw:
        return MAX_PENDING_PER_PROJECT
    value = int(raw)
    if not 1 <= value <= 100_000:
        raise ValueError(f"JIDO_MAX_PENDING_APPROVALS={raw} is outside 1 … 100000")
    return value


def _no_release() -> AbstractAsyncContextManager[None]:
    return contextlib.nullcontext()


class ApprovalGate:
    """The ``ask`` step of the pipeline, and the conversation inputs it listens to.

    ``release`` gives the request's slot back while a call waits
    (``ServiceHost.released``); ``max_pending`` bounds the waits per project.
    """

    def __init__(
        self,
        bus: Bus,
        *,
        release: Callable[[], AbstractAsyncContextManager[None]] = _no_release,
        max_pending: int | None = None,
    ) -> None:
        self.bus = bus
        self.release = release
        self.max_pending = pending_limit() if max_pending is None else max_pending
        if self.max_pending < 1:
            raise ValueError(f"max_pending must be at least 1, got {self.max_pending}")
        self.session = SessionApprovals()
        self._pending: dict[tuple[str, str, str], asyncio.Future[Reply]] = {}
        self._per_project: dict[str, int] = {}
        self._watches: dict[tuple[str, str], tuple[Subscription, int]] = {}

    def waiting(self, project_id: str) -> int:
        """Calls of ``project_id`` waiting for an answer on this replica."""
        return self._per_project.get(project_id, 0)

    async def admit(self, call: Call, decision: Decision, timeout_s: float) -> bool:
        """Let ``call`` through when allowed, approved earlier in its session, or approved now.

        Whether a human was asked (the call waited).
        """
        cid = conversation_to_ask(decision, call.conversation_id)
        if cid is None:
            return False
        key = approval_key(call.name, call.args, decision)
        if self.session.grants(call.project_id, cid, key):
            return False
        question = ApprovalRequested(
            request_id=call.request_id, tool=call.name, args=call.args, reason=decision.reason
        )
        answer = (await self._reply(call, cid, question, timeout_s)).decision
        if judge(answer, decision, timeout_s):
            self.session.remember(call.project_id, cid, key)
        return True

    async def ask(
        self, call: Call, question_id: str, args: dict[str, Any], reason: str, *, timeout_s: float
    ) -> str:
        """Ask ``call``'s conversation a question of the running call (a host its pass would
        reach), as ``<request id>/<question_id>`` under the call's tool name: the raw answer
        (a decision, ``timeout`` or ``cancelled``), or ``no_conversation`` when it has none."""
        reply = await self.ask_form(call, question_id, args, reason, None, timeout_s=timeout_s)
        return reply.decision

    async def ask_form(
        self,
        call: Call,
        question_id: str,
        args: dict[str, Any],
        reason: str,
        form: dict[str, Any] | None,
        *,
        timeout_s: float,
    ) -> Reply:
        """:meth:`ask` with the ``form`` the answer may fill (an MCP server's elicitation): the
        decision and the answer's content, the client's, unchecked (the asker checks it against
        the form)."""
        cid = call.conversation_id
        if cid is None:
            return Reply(NO_CONVERSATION)
        question = ApprovalRequested(
            request_id=f"{call.request_id}/{question_id}", tool=call.name, args=args, reason=reason, form=form
        )
        return await self._reply(call, cid, question, timeout_s)

    def cancel(self, call: CallKey) -> None:
        """A call waiting for approval stops waiting (its answer is ``cancelled``), and so do the
        questions it asks while it runs (``<request id>/…``)."""
        for (p, _c, r), fut in list(self._pending.items()):
            mine = r == call[1] or r.startswith(call[1] + "/")
            if p == call[0] and mine and not fut.done():
                fut.set_result(Reply(CANCELLED))

    async def close(self) -> None:
        for sub, _ in list(self._watches.values()):
            with contextlib.suppress(nats.errors.Error):
                await sub.unsubscribe()
        self._watches.clear()

    async def _reply(self, call: Call, cid: str, question: ApprovalRequested, timeout_s: float) -> Reply:
        project_id = call.project_id
        if self.waiting(project_id) >= self.max_pending:
            raise QuotaExceeded("project (calls waiting for approval)", self.max_pending)
        pending_key = (project_id, cid, question.request_id)
        fut: asyncio.Future[Reply] = asyncio.get_running_loop().create_future()
        self._pending[pending_key] = fut
        self._per_project[project_id] = self.waiting(project_id) + 1
        try:
            await self._watch(project_id, cid)
            try:
                await self.bus.emit(question, **call.ext)
                async with self.release():  # a human takes their time: hold no request slot
                    with approval_wait(self.bus, call) as waited:
                        try:
                            answer = await asyncio.wait_for(fut, timeout_s)
                        except TimeoutError:
                            answer = Reply(TIMEOUT)
                        waited.answered(answer.decision)
                        return answer
            finally:
                await self._unwatch(project_id, cid)
        finally:
            self._pending.pop(pending_key, None)
            left = self.waiting(project_id) - 1
            if left > 0:
                self._per_project[project_id] = left
            else:
                self._per_project.pop(project_id, None)

    async def _watch(self, project_id: str, cid: str) -> None:
        """Listen to the conversation's input (one subscription however many calls ask)."""
        key = (project_id, cid)
        current = self._watches.get(key)
        if current is not None:
            self._watches[key] = (current[0], current[1] + 1)
            return

        async def on_input(env: Envelope) -> None:
            if env.type != ApprovalResponse.TYPE:
                return
            try:
                answer = ApprovalResponse.model_validate({**(env.data or {}), "type": env.type})
            except ValueError:
                log.warning("malformed approval response on %s", env.nats_subject)
                return
            fut = self._pending.get((project_id, cid, answer.request_id))
            if fut is not None and not fut.done():
                fut.set_result(Reply(answer.decision, answer.content))

        sub = await self.bus.subscribe(subjects.conversation_in(project_id, cid), on_input)
        await self.bus.nc.flush()
        self._watches[key] = (sub, 1)

    async def _unwatch(self, project_id: str, cid: str) -> None:
        key = (project_id, cid)
        current = self._watches.get(key)
        if current is None:
            return
        sub, count = current
        if count > 1:
            self._watches[key] = (sub, count - 1)
            return
        del self._watches[key]
        with contextlib.suppress(nats.errors.Error):
            await sub.unsubscribe()
