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
so an ``approve_session`` would approve for the others too (decision 0202).
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from typing import Any, Final, Literal

from jidocode.client import ApprovalRequest, JidoClient
from jidocode.shared.bus import Bus
from jidocode.shared.clients import ProjectClient
from jidocode.shared.envelope import new_id
from jidocode.shared.events.tools import ToolResult

__all__ = ["ANSWER_WAIT_S", "MAX_PENDING", "Approvals", "Pending", "TooManyPending"]

log = logging.getLogger("jidocode.mcp_gateway")

#: Seconds the approvals conversation waits for an MCP client's answer before denying
#: (the tool runner's own ``approval_timeout_s`` usually ends the wait sooner).
ANSWER_WAIT_S: Final = 600.0
#: Calls of one server waiting for an answer carried in a later ``tools/call`` round
#: (2026-07-28 clients); one more is refused with :class:`TooManyPending`.
MAX_PENDING: Final = 32

Decision = Literal["approve_once", "deny"]


class TooManyPending(Exception):
    """More than :data:`MAX_PENDING` calls wait for an answer from a later round."""


@dataclass
class Pending:
    """A call the runner asked about, waiting for the client's next round."""

    request_id: str
    tool: str
    args: dict[str, Any]
    run: asyncio.Task[ToolResult]
    question: ApprovalRequest
    #: The conversation the call runs in (the approvals conversation).
    conversation_id: str


@dataclass
class _Waiter:
    asked: asyncio.Future[ApprovalRequest]
    answer: asyncio.Future[Decision] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future()
    )


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

    def expect(self, request_id: str) -> asyncio.Future[ApprovalRequest]:
        """Listen for the runner's question about call ``request_id``: the future it resolves."""
        waiter = _Waiter(asked=asyncio.get_running_loop().create_future())
        self._waiters[request_id] = waiter
        return waiter.asked

    def answer(self, request_id: str, decision: Decision) -> None:
        """Answer the question about ``request_id`` (nothing happens if it was never asked)."""
        waiter = self._waiters.get(request_id)
        if waiter is not None and not waiter.answer.done():
            waiter.answer.set_result(decision)

    def forget(self, request_id: str) -> None:
        """The call is over: stop listening for it (an unanswered question is denied)."""
        waiter = self._waiters.pop(request_id, None)
        if waiter is not None and not waiter.answer.done():
            waiter.answer.set_result("deny")

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

    async def _on_ask(self, request: ApprovalRequest) -> Decision:
        waiter = self._waiters.get(request.request_id)
        if waiter is None:
            return "deny"  # not a call of ours (another server's, or one already over)
        if not waiter.asked.done():
            waiter.asked.set_result(request)
        try:
            return await asyncio.wait_for(asyncio.shield(waiter.answer), ANSWER_WAIT_S)
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
