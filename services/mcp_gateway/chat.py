"""The ``chat`` and ``cancel`` tools: a conversation of the project driven from an MCP client.

``chat`` sends a message to a conversation (a new one, or the one ``conversation_id``
names), reports each piece of the streamed answer as an MCP progress notification, and
returns the final answer with the conversation id. ``cancel`` cancels the running turn of
a conversation (its LLM call and tool calls stop; the ``chat`` call waiting on it returns
an error saying so). Both go through the client SDK and the conversation service's typed
client, as any other client does.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Final, TypeVar

import mcp_types as types
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from jidocode.client import ApprovalAnswer, ApprovalRequest, ApproveCallback, Decision, JidoClient, TurnFailed
from jidocode.shared.bus import Bus
from jidocode.shared.clients import ConversationsClient
from jidocode.shared.envelope import Envelope, new_id
from jidocode.shared.errors import JidoError, RequestTimeout
from jidocode.shared.events.conversation import Cancel
from jidocode.shared.events.engine import ProjectInfo

from .approvals import ANSWER_WAIT_S, MAX_PENDING, TooManyPending
from .logs import LogLevels, TurnLog
from .mapping import error_result

__all__ = [
    "CANCEL_TOOL",
    "CHAT_TOOL",
    "MAX_CHAT_TIMEOUT_S",
    "MAX_MESSAGE_CHARS",
    "CancelArgs",
    "ChatArgs",
    "ParkedTurn",
    "ParkedTurns",
    "TurnQuestions",
    "parse_args",
    "run_cancel",
    "run_chat",
]

#: The longest message ``chat`` sends (the conversation service has its own byte limit too).
MAX_MESSAGE_CHARS: Final = 100_000
#: The longest a ``chat`` call waits for the turn's answer.
MAX_CHAT_TIMEOUT_S: Final = 3600.0

#: A conversation id: one subject token.
ID_PATTERN: Final = r"^[A-Za-z0-9_-]{1,128}$"

M = TypeVar("M", bound=BaseModel)

Progress = Callable[[float, str], Awaitable[None]]
#: Called with each output event of a ``chat`` turn's conversation.
EventHook = Callable[[Envelope], Awaitable[None]]


class ChatArgs(BaseModel):
    """The arguments of ``chat``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    message: str = Field(min_length=1, max_length=MAX_MESSAGE_CHARS, description="what to say")
    conversation_id: str | None = Field(
        default=None,
        pattern=ID_PATTERN,
        description="the conversation to continue; a new one when absent",
    )
    timeout_s: float = Field(
        default=600.0, gt=0, le=MAX_CHAT_TIMEOUT_S, description="seconds to wait for the answer"
    )


class CancelArgs(BaseModel):
    """The arguments of ``cancel``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    conversation_id: str = Field(pattern=ID_PATTERN, description="the conversation whose turn to cancel")
    reason: str | None = Field(
        default=None, max_length=1000, description="why (recorded in the conversation)"
    )


def _schema(model: type[BaseModel]) -> dict[str, Any]:
    schema = model.model_json_schema()
    schema.pop("title", None)
    return schema


CHAT_TOOL: Final = types.Tool(
    name="chat",
    description=(
        "Send a message to a JidoCode conversation of this project (a new one unless conversation_id "
        "names one) and wait for the assistant's answer; progress notifications stream the answer "
        "while the turn runs. Returns the answer and the conversation id."
    ),
    input_schema=_schema(ChatArgs),
    output_schema={
        "type": "object",
        "properties": {"conversation_id": {"type": "string"}, "answer": {"type": "string"}},
        "required": ["conversation_id", "answer"],
    },
    annotations=types.ToolAnnotations(read_only_hint=False, destructive_hint=True, open_world_hint=True),
)

CANCEL_TOOL: Final = types.Tool(
    name="cancel",
    description="Cancel the running turn of a JidoCode conversation of this project (its LLM call and tools stop).",
    input_schema=_schema(CancelArgs),
    annotations=types.ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=True),
)


def parse_args(model: type[M], tool: str, arguments: dict[str, Any] | None) -> M | types.CallToolResult:
    """``arguments`` as ``model``, or an error result naming each bad field."""
    try:
        return model.model_validate(arguments or {})
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc']) or 'arguments'}: {err['msg']}" for err in exc.errors()
        )
        return error_result(f"invalid arguments for {tool}: {problems}", error="invalid_input")


async def run_chat(
    bus: Bus,
    project: ProjectInfo,
    args: ChatArgs,
    *,
    progress: Progress,
    approve: ApproveCallback | None,
    on_abandon: Callable[[str], None],
    on_event: EventHook | None = None,
) -> types.CallToolResult:
    """One ``chat`` call: the turn's answer, or an error result saying why there is none.

    ``on_abandon(conversation_id)`` is called when the call is cancelled while the turn runs
    (it cannot await: the caller is being cancelled); ``on_event`` gets each output event of
    the conversation (the MCP log messages).
    """
    client = JidoClient(bus, project, owns_bus=False, settings={})
    pieces = 0

    async def on_delta(text: str) -> None:
        nonlocal pieces
        if text:
            pieces += 1
            await progress(float(pieces), text)

    if on_event is not None:
        client.on_event(on_event)
    try:
        if approve is not None:
            await client.configure_tools(approve=approve)
        conversation_id = await client.start_conversation(args.conversation_id)
        try:
            answer = await client.send_message(args.message, on_delta, timeout=args.timeout_s)
        except asyncio.CancelledError:  # the MCP client cancelled its request: cancel the turn too
            on_abandon(conversation_id)
            raise
        except TurnFailed as exc:
            return error_result(
                f"the turn of conversation {conversation_id} ended without an answer ({exc.type}): {exc.message}",
                error=exc.type,
                conversation_id=conversation_id,
            )
        except RequestTimeout:
            return error_result(
                f"no answer within {args.timeout_s:g} s in conversation {conversation_id} (the turn goes on; "
                "call chat again with this conversation_id, or cancel it)",
                error="timeout",
                conversation_id=conversation_id,
            )
        return types.CallToolResult(
            content=[types.TextContent(text=answer)],
            structured_content={"conversation_id": conversation_id, "answer": answer},
        )
    except JidoError as exc:
        return error_result(f"chat failed ({exc.type}): {exc.message}", error=exc.type)
    finally:
        await client.close()


async def run_cancel(bus: Bus, project_id: str, args: CancelArgs) -> types.CallToolResult:
    """One ``cancel`` call: the cancel sent to the conversation's input."""
    try:
        event = Cancel(reason=args.reason)
        accepted = await ConversationsClient(bus, project_id, timeout=15.0).send_event(
            args.conversation_id, event.type, event.to_data()
        )
    except JidoError as exc:
        return error_result(f"cancel failed ({exc.type}): {exc.message}", error=exc.type)
    return types.CallToolResult(
        content=[types.TextContent(text=f"cancel sent to conversation {args.conversation_id}")],
        structured_content={"conversation_id": args.conversation_id, "event_id": accepted.id},
    )


class TurnQuestions:
    """The asks of one ``chat`` turn on a 2026-07-28 connection, handed to whichever round of
    the ``chat`` request is current; that round's progress sink gets the answer's pieces, and
    its request the turn's log messages (``log``)."""

    def __init__(self, log: TurnLog | None = None) -> None:
        self.questions: asyncio.Queue[tuple[ApprovalRequest, asyncio.Future[Decision | ApprovalAnswer]]] = (
            asyncio.Queue()
        )
        self.sink: Progress | None = None
        self.log = log if log is not None else TurnLog(LogLevels())  # following no request: silent

    async def approve(self, request: ApprovalRequest) -> Decision | ApprovalAnswer:
        """The approve callback of the turn's client: wait for a round to carry the answer (a
        form's values with it)."""
        answer: asyncio.Future[Decision | ApprovalAnswer] = asyncio.get_running_loop().create_future()
        await self.questions.put((request, answer))
        try:
            return await asyncio.wait_for(asyncio.shield(answer), ANSWER_WAIT_S)
        except TimeoutError:
            return "deny"

    async def progress(self, count: float, text: str) -> None:
        if self.sink is not None:
            await self.sink(count, text)


@dataclass
class ParkedTurn:
    """A ``chat`` turn waiting for the client's next round to answer ``question``."""

    task: asyncio.Task[types.CallToolResult]
    turn: TurnQuestions
    question: ApprovalRequest
    answer: asyncio.Future[Decision | ApprovalAnswer]


class ParkedTurns:
    """The turns waiting for a round, bounded (``max_pending``); each taken once."""

    def __init__(self, *, max_pending: int = MAX_PENDING) -> None:
        if max_pending < 1:
            raise ValueError(f"max_pending must be at least 1, got {max_pending}")
        self.max_pending = max_pending
        self._parked: dict[str, ParkedTurn] = {}

    def park(self, parked: ParkedTurn) -> str:
        if len(self._parked) >= self.max_pending:
            raise TooManyPending(
                f"{len(self._parked)} chat turns already wait for an approval from this MCP server's "
                f"clients (at most {self.max_pending}); answer those first"
            )
        token = str(new_id())
        self._parked[token] = parked
        parked.task.add_done_callback(lambda _: self._parked.pop(token, None))
        return token

    def take(self, token: str) -> ParkedTurn | None:
        return self._parked.pop(token, None)

    def close(self) -> None:
        for parked in list(self._parked.values()):
            parked.task.cancel()
        self._parked.clear()
