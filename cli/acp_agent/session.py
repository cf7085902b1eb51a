"""One ACP session: one conversation of one project, through the client SDK's :class:`JidoClient`.

The session id is the conversation id, so ``session/load`` with it reopens the conversation
(after a restart of the editor or of the agent). A prompt is sent as the user's message (a
``/name arguments`` naming one of the project's commands runs that command, as ``jidocode chat``
does; ``/rewind`` is the session's own, :mod:`.rewind`) and its answer streams back as
``agent_message_chunk`` updates; the conversation's tool
events become ``tool_call`` / ``tool_call_update`` updates (:mod:`.mapping`) and its ``ask``
approvals ``session/request_permission`` requests. A cancelled turn ends the prompt with
``cancelled`` and the conversation is resumed at once, so the next prompt is an ordinary one.
"""

from __future__ import annotations

import asyncio
import logging
import os
from typing import Any

from acp import RequestError
from acp.helpers import (
    SessionUpdate,
    update_agent_message_text,
    update_available_commands,
    update_user_message_text,
)
from acp.interfaces import Client
from acp.schema import (
    EmbeddedResourceContentBlock,
    PermissionOption,
    PromptResponse,
    ResourceContentBlock,
    StopReason,
    TextContentBlock,
    TextResourceContents,
    ToolCallUpdate,
)

from jidocode.cli.chat_lines import trust_line
from jidocode.client import ApprovalRequest, Decision, JidoClient, TurnFailed, parse_slash_command
from jidocode.shared.envelope import Envelope
from jidocode.shared.errors import JidoError
from jidocode.shared.events.conversation import ToolCallCompleted, ToolCallFailed, ToolCallRequested

from .mapping import (
    PERMISSION_OPTIONS,
    available_commands,
    decision_of_outcome,
    file_uri_path,
    inside_root,
    permission_tool_call,
    tool_call_end,
    tool_call_running,
    tool_call_start,
)
from .rewind import REWIND_COMMAND, allowed, is_rewind, rewind_in_session

__all__ = ["AcpSession", "error_of", "invalid"]

log = logging.getLogger("jidocode.cli.acp")

PromptBlock = Any  # one content block of session/prompt (the SDK's union of them)

#: What a turn that did not answer ends the prompt with (a failure is an error instead).
_STOP_REASON: dict[str, StopReason] = {"cancelled": "cancelled", "max_turns": "max_turn_requests"}


def invalid(message: str, *, code: int = -32602) -> RequestError:
    """A request the editor got wrong, with the message it shows (JSON-RPC "invalid params")."""
    return RequestError(code, message)


def error_of(exc: JidoError) -> RequestError:
    """A JidoCode error as the JSON-RPC error the editor shows: its type and message."""
    code = -32602 if exc.type in ("invalid_input", "not_found") else -32603
    return RequestError(code, f"{exc.type}: {exc.message}", {"type": exc.type, "details": dict(exc.details)})


class AcpSession:
    """One editor session on one conversation. Make one with :meth:`open`."""

    def __init__(self, conn: Client, client: JidoClient, *, read_buffers: bool) -> None:
        self.conn = conn
        self.client = client
        self.read_buffers = read_buffers
        self.running = False
        self._untrusted_notice = not client.trust_state.trusted
        client.on_event(self._forward)
        self._tasks: set[asyncio.Task[None]] = set()

    @property
    def session_id(self) -> str:
        assert self.client.conversation_id is not None
        return self.client.conversation_id

    @classmethod
    async def open(
        cls, conn: Client, client: JidoClient, conversation_id: str | None, *, read_buffers: bool
    ) -> AcpSession:
        """Follow the conversation (a new one without an id) with approvals sent to the editor."""
        state = client.trust_state
        if not state.trusted:
            log.warning("%s", state.problem or trust_line(state.root))
        session = cls(conn, client, read_buffers=read_buffers)
        await client.configure_tools(approve=session._ask)
        await client.start_conversation(conversation_id)
        return session

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await self.client.close()

    # -- updates ------------------------------------------------------------------

    async def _update(self, update: SessionUpdate) -> None:
        await self.conn.session_update(session_id=self.session_id, update=update)

    def announce_commands(self) -> None:
        """Send the project's slash commands once the editor has the session (after the response)."""
        task = asyncio.ensure_future(self._send_commands())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _send_commands(self) -> None:
        """``/rewind`` (the session's own), then the project's commands (one named rewind is not)."""
        try:
            project = available_commands(await self.client.list_commands())
        except JidoError as exc:
            log.warning("the project's commands are not offered: %s", exc.message)
            project = []
        own = [REWIND_COMMAND, *(c for c in project if c.name != REWIND_COMMAND.name)]
        await self._update(update_available_commands(own))

    async def _forward(self, env: Envelope) -> None:
        """A tool event of the conversation as the editor's tool call update."""
        if env.type not in (ToolCallRequested.TYPE, ToolCallCompleted.TYPE, ToolCallFailed.TYPE):
            return
        try:
            event = env.event()
        except JidoError:
            log.warning("malformed %s %s: not shown", env.type, env.id)
            return
        if isinstance(event, ToolCallRequested):
            await self._update(tool_call_start(self.client.root_path, env.id, event.name, dict(event.args)))
        elif isinstance(event, ToolCallCompleted):
            await self._update(tool_call_end(event.request_id, event.name, data=event.data))
        elif isinstance(event, ToolCallFailed):
            await self._update(
                tool_call_end(event.request_id, event.name, error=f"{event.error_type}: {event.message}")
            )

    async def _ask(self, request: ApprovalRequest) -> Decision:
        """An ``ask`` rule matched: the editor's user answers (allow once / always / reject); an
        allowed call is ``in_progress`` from then on."""
        answer = await self.conn.request_permission(
            session_id=self.session_id,
            tool_call=permission_tool_call(self.client.root_path, request),
            options=list(PERMISSION_OPTIONS),
        )
        decision = decision_of_outcome(answer.outcome)
        if decision != "deny":
            await self._update(tool_call_running(request.request_id))
        return decision

    async def _ask_restore(self, tool_call: ToolCallUpdate, options: list[PermissionOption]) -> bool:
        """``/rewind``'s question before files are restored: True when the user allowed it."""
        answer = await self.conn.request_permission(
            session_id=self.session_id, tool_call=tool_call, options=options
        )
        return allowed(answer.outcome)

    async def replay_history(self) -> None:
        """Send the conversation so far (``session/load``): the user's and the assistant's messages."""
        for message in await self.client.get_history():
            content = message.get("content")
            if not isinstance(content, str) or not content:
                continue
            if message.get("role") == "user":
                await self._update(update_user_message_text(content))
            elif message.get("role") == "assistant":
                await self._update(update_agent_message_text(content))

    # -- prompts ------------------------------------------------------------------

    async def prompt(self, blocks: list[PromptBlock]) -> PromptResponse:
        """One turn: the prompt's text (with the files it links) sent, the answer streamed."""
        if self.running:
            raise invalid("a prompt of this session is still running: cancel it or wait", code=-32600)
        self.running = True
        try:
            text = await self._text_of(blocks)
            if self._untrusted_notice:
                self._untrusted_notice = False
                await self._update(update_agent_message_text(trust_line(self.client.root_path) + "\n\n"))
            return PromptResponse(stop_reason=await self._turn(text))
        finally:
            self.running = False

    async def _turn(self, text: str) -> StopReason:
        async def on_delta(piece: str) -> None:
            await self._update(update_agent_message_text(piece))

        command = parse_slash_command(text)
        rewind = is_rewind(text)
        try:
            if rewind is not None:
                await rewind_in_session(self.client, rewind, on_delta, self._ask_restore)
            elif command is not None:
                await self.client.run_command(command.name, command.arguments, on_delta)
            else:
                await self.client.send_message(text, on_delta)
        except TurnFailed as failed:
            reason = _STOP_REASON.get(failed.type)
            if reason is None:
                raise error_of(failed) from None
            if reason == "cancelled":
                await self.client.resume()
            return reason
        except JidoError as exc:
            raise error_of(exc) from None
        return "end_turn"

    async def cancel(self) -> None:
        """``session/cancel``: the running turn and its tools stop (nothing runs: nothing to do)."""
        if self.running:
            await self.client.cancel("cancelled in the editor")

    async def _text_of(self, blocks: list[PromptBlock]) -> str:
        """The message: the text blocks, then each linked or embedded file as context."""
        parts: list[str] = []
        for block in blocks:
            if isinstance(block, TextContentBlock):
                parts.append(block.text)
            elif isinstance(block, ResourceContentBlock):
                parts.append(await self._linked(block))
            elif isinstance(block, EmbeddedResourceContentBlock) and isinstance(
                block.resource, TextResourceContents
            ):
                parts.append(_context(block.resource.uri, block.resource.text))
            else:
                raise invalid(
                    f"a {block.type} block is not supported: send text, or a file as a link or embedded text"
                )
        return "\n\n".join(p for p in parts if p)

    async def _linked(self, link: ResourceContentBlock) -> str:
        """A linked file: its text as the editor has it (unsaved changes included) when the
        editor reads files for the agent and the file is inside the project; else its name."""
        path = file_uri_path(link.uri)
        local = inside_root(self.client.root_path, path) if path is not None and os.path.isabs(path) else None
        if local is None:
            return f"@{link.uri}"
        relative = os.path.relpath(local, self.client.root_path)
        if not self.read_buffers:
            return f"@{relative}"
        buffer = await self.conn.read_text_file(session_id=self.session_id, path=local)
        return _context(relative, buffer.content)


def _context(name: str, text: str) -> str:
    return f'<file name="{name}" source="editor">\n{text}\n</file>'
