"""MCP logging: a ``chat`` turn's conversation events as ``notifications/message``, at the client's level.

On 2025 connections the client sets its level with ``logging/setLevel`` (kept per connection
by :class:`LogLevels`; nothing is sent before it does); on 2026-07-28 ones each request opts in
with the reserved ``_meta`` log-level key, as the SDK's :func:`allowed_log_levels` reads it.
Each output event of the conversation a ``chat`` call drives becomes one log message on that
request's stream (:class:`TurnLog`), its level from :func:`event_level`; the answer's streamed
pieces are not logged (progress notifications carry them).
"""

from __future__ import annotations

import json
import logging
import weakref
from typing import Any, Final, get_args

import mcp_types as types
from mcp.server.connection import allowed_log_levels
from mcp.server.context import ServerRequestContext
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from jidocode.shared.envelope import Envelope
from jidocode.shared.events.conversation import AssistantDelta

__all__ = ["LOGGER", "MAX_LOG_DATA_CHARS", "LogLevels", "TurnLog", "event_level", "log_data"]

log = logging.getLogger("jidocode.mcp_gateway")

#: The ``logger`` name of the conversation events sent as log messages.
LOGGER: Final = "jidocode.conversation"
#: An event's data longer than this (as JSON) is sent as a preview of that many characters.
MAX_LOG_DATA_CHARS: Final = 8000

#: Every level, least severe first (the order of the spec's ``LoggingLevel``).
LEVELS: Final[tuple[types.LoggingLevel, ...]] = get_args(types.LoggingLevel)

_ERRORS: Final = frozenset({"conversation.error", "conversation.llm.failed"})
_WARNINGS: Final = frozenset({"conversation.queue.overflow", "conversation.loop.stopped"})
_INFO: Final = frozenset(
    {
        "conversation.user.message",
        "conversation.assistant.message",
        "conversation.tool.requested",
        "conversation.tool.completed",
        "conversation.turn.ended",
        "conversation.subagent.started",
        "conversation.subagent.completed",
        "conversation.compaction.completed",
        "conversation.started",
    }
)

Ctx = ServerRequestContext[Any]


def event_level(event_type: str) -> types.LoggingLevel | None:
    """The log level of a conversation event, ``None`` for one never logged (a streamed piece)."""
    if event_type == AssistantDelta.TYPE:
        return None
    if event_type in _ERRORS:
        return "error"
    if event_type in _WARNINGS or event_type.endswith(".failed"):
        return "warning"
    if event_type == "conversation.approval.requested":
        return "notice"
    return "info" if event_type in _INFO else "debug"


def log_data(env: Envelope) -> dict[str, Any]:
    """What a log message carries of ``env``: its type and data (a preview when the data is long)."""
    data: Any = env.data
    shown = json.dumps(data, ensure_ascii=False, default=str)
    if len(shown) > MAX_LOG_DATA_CHARS:
        data = {"preview": shown[:MAX_LOG_DATA_CHARS] + "…", "chars": len(shown)}
    return {"type": env.type, "id": env.id, "data": data}


class LogLevels:
    """The level each 2025 connection set with ``logging/setLevel`` (forgotten with the connection)."""

    def __init__(self) -> None:
        self._levels: weakref.WeakKeyDictionary[object, types.LoggingLevel] = weakref.WeakKeyDictionary()

    async def set_level(self, ctx: Ctx, params: types.SetLevelRequestParams) -> types.EmptyResult:
        """The ``logging/setLevel`` handler."""
        self._levels[_connection(ctx)] = params.level
        return types.EmptyResult()

    def allowed(self, ctx: Ctx) -> frozenset[types.LoggingLevel]:
        """The levels this request may receive: from its ``_meta`` (2026-07-28) or its connection's level."""
        if ctx.protocol_version in MODERN_PROTOCOL_VERSIONS:
            return allowed_log_levels(ctx.protocol_version, ctx.meta)
        level = self._levels.get(_connection(ctx))
        return frozenset() if level is None else frozenset(LEVELS[LEVELS.index(level) :])


def _connection(ctx: Ctx) -> object:
    """The connection ``ctx``'s request came on (one per client; ``ctx.session`` is per request)."""
    return ctx.session._connection


class TurnLog:
    """Sends a turn's events as log messages to the request that follows the turn now.

    A 2026-07-28 turn that asks is followed by one request per round: :meth:`follow` each.
    """

    def __init__(self, levels: LogLevels) -> None:
        self._levels = levels
        self._ctx: Ctx | None = None
        self._allowed: frozenset[types.LoggingLevel] = frozenset()

    def follow(self, ctx: Ctx | None) -> None:
        """Send to ``ctx``'s request from now on (``None``: to nobody, between two rounds)."""
        self._ctx = ctx
        self._allowed = self._levels.allowed(ctx) if ctx is not None else frozenset()

    async def on_event(self, env: Envelope) -> None:
        """The conversation's event callback (``JidoClient.on_event``)."""
        ctx, level = self._ctx, event_level(env.type)
        if ctx is None or level is None or level not in self._allowed:
            return
        note = types.LoggingMessageNotification(
            params=types.LoggingMessageNotificationParams(level=level, logger=LOGGER, data=log_data(env))
        )
        try:
            await ctx.session.send_notification(note, related_request_id=ctx.request_id)
        except Exception as exc:  # the request's stream is gone: the log is best effort
            log.debug("could not send %s as a log message: %s", env.type, exc)
