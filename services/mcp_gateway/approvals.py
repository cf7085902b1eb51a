"""How an ``ask`` of the policy reaches an MCP client: the approvals conversation.

The tool runner asks about a call in the call's conversation (``approval.requested`` on
its output, the answer on its input: ``services/tool_runner/approvals.py``). A call from
an MCP client that supports elicitation therefore runs in a conversation of the project
that this server starts for the purpose (``mcp-<id>``, one per server), followed by the
client SDK (:class:`~jidocode.client.JidoClient`) whose ``approve`` callback hands the
question to the MCP call that made it and waits for that call's answer. A call from a
client without elicitation runs with no conversation, exactly as ``jidocode tools run``
does, and the runner refuses an ``ask`` at once.

Only the call that was asked can answer (by request id, a fresh one per call), and only
``approve_once`` or ``deny``: the conversation is shared by every client of this server,
so an ``approve_session`` would approve for the others too (decision 0202). A call may ask
more than once: the policy's ``ask`` (the call's own request id), then each elicitation of
the MCP server it calls (``<request id>/elicitation-<n>``, with the server's form): its
questions come in order on the queue :meth:`Approvals.expect` returns, each answered by its
own request id, a form's with the values the client gave.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from typing import Any, Final, Literal, TypeAlias

from jidocode.client import ApprovalAnswer, ApprovalRequest, JidoClient
from jidocode.shared.bus import Bus
from jidocode.shared.clients import ProjectClient
from jidocode.shared.envelope import new_id
from jidocode.shared.events.tools import ToolResult

__all__ = ["ANSWER_WAIT_S", "MAX_PENDING", "Answer", "Approvals", "Pending", "TooManyPending", "call_of"]

log = logging.getLogger("jidocode.mcp_gateway")

#: Seconds the approvals conversation waits for an MCP client's answer before denying
#: (the tool runner's own ``approval_timeout_s`` usually ends the wait sooner).
ANSWER_WAIT_S: Final = 600.0
#: Calls of one server waiting for an answer carried in a later ``tools/call`` round
#: (2026-07-28 clients); one more is refused with :class:`TooManyPending`.
MAX_PENDING: Final = 32

Decision = Literal["approve_once", "deny"]
#: An answer: a decision, or an approval with the values of the question's form.
Answer: TypeAlias = Decision | ApprovalAnswer

#: What marks the request id of an MCP server's elicitation during a call.
_ELICITATION = "/elicitation-"


def call_of(request_id: str) -> str:
    """The call a question's ``request_id`` is about: the call's own id for the policy's ask,
    ``<id>/elicitation-<n>`` for an elicitation of the server it calls."""
    return request_id.split(_ELICITATION, 1)[0]


class TooManyPending(Exception):
    """More than :data:`MAX_PENDING` calls wait for an answer from a later round."""


@dataclass
class Pending:
    """A call in the approvals conversation, and when parked the question the client's next
    round answers."""

    request_id: str
    tool: str
    args: dict[str, Any]
    run: asyncio.Task[ToolResult]
    #: The question the next round answers (``None`` while the call has asked none).
    question: ApprovalRequest | None
    #: The conversation the call runs in (the approvals conversation).
    conversation_id: str
    #: The call's questions still to come (:meth:`Approvals.expect`).
    questions: asyncio.Queue[ApprovalRequest]


@dataclass
class _Waiter:
    #: The call's questions, in the order asked.
    asked: asyncio.Queue[ApprovalRequest] = field(default_factory=asyncio.Queue)
    #: The answer each question waits for, by its request id.
    answers: dict[str, asyncio.Future[Answer]] = field(default_factory=dict)


class Approvals:
    """The approvals conversation of one project's MCP server, started on first use."""

    def __init__(self, bus: Bus, project_id: str, *, max_pending: int = MAX_PENDING) -> None:
        if max_pending < 1:
            raise ValueError(f"max_pending must be at least 1, got {max_pending}")
        self.bus = bus
        self.project_id = project_id
        self.max_pending = max_pending
        self._client: JidoClient | None = None
        self._lock = asyncio.Lock()
        self._waiters: dict[str, _Waiter] = {}
        self._pending: dict[str, Pending] = {}

    async def conversation_id(self) -> str:
        """The approvals conversation (started, and followed, on first use)."""
        async with self._lock:
            if self._client is None:
                info = await ProjectClient(self.bus, self.project_id, timeout=15.0).info()
                client = JidoClient(self.bus, info, owns_bus=False, settings={})
                await client.configure_tools(approve=self._on_ask)
                await client.start_conversation("mcp-" + str(new_id()).lower())
                self._client = client
            assert self._client.conversation_id is not None
            return self._client.conversation_id

    def expect(self, request_id: str) -> asyncio.Queue[ApprovalRequest]:
        """Listen for the runner's questions about call ``request_id``: the queue they come on."""
        waiter = _Waiter()
        self._waiters[request_id] = waiter
        return waiter.asked

    def answer(self, request_id: str, answer: Answer) -> None:
        """Answer the question ``request_id`` (nothing happens if it was never asked)."""
        waiter = self._waiters.get(call_of(request_id))
        future = waiter.answers.get(request_id) if waiter is not None else None
        if future is not None and not future.done():
            future.set_result(answer)

    def forget(self, request_id: str) -> None:
        """Call ``request_id`` is over: stop listening for it (an unanswered question is denied)."""
        waiter = self._waiters.pop(request_id, None)
        for future in waiter.answers.values() if waiter is not None else ():
            if not future.done():
                future.set_result("deny")

    def park(self, pending: Pending) -> str:
        """Keep ``pending`` until the client's next round; the token that round carries back."""
        if len(self._pending) >= self.max_pending:
            raise TooManyPending(
                f"{len(self._pending)} tool calls already wait for an approval from this MCP server's "
                f"clients (at most {self.max_pending}); answer those first"
            )
        token = str(new_id())
        self._pending[token] = pending

        def done(_: asyncio.Task[ToolResult]) -> None:
            self._pending.pop(token, None)
            self.forget(pending.request_id)

        pending.run.add_done_callback(done)
        return token

    def take(self, token: str) -> Pending | None:
        """The call parked under ``token`` (once), or ``None`` when there is none (any more)."""
        return self._pending.pop(token, None)

    @property
    def parked(self) -> int:
        return len(self._pending)

    async def _on_ask(self, request: ApprovalRequest) -> Answer:
        waiter = self._waiters.get(call_of(request.request_id))
        if waiter is None or request.request_id in waiter.answers:
            return "deny"  # not a call of ours (another server's, or one already over), or asked twice
        answer = waiter.answers[request.request_id] = asyncio.get_running_loop().create_future()
        waiter.asked.put_nowait(request)
        try:
            return await asyncio.wait_for(asyncio.shield(answer), ANSWER_WAIT_S)
        except TimeoutError:
            return "deny"

    async def close(self) -> None:
        for pending in list(self._pending.values()):
            pending.run.cancel()
        self._pending.clear()
        for request_id in list(self._waiters):
            self.forget(request_id)
        client, self._client = self._client, None
        if client is not None:
            await client.close()  # owns no bus: it only stops following the conversation
