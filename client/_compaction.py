"""``JidoClient.compact()``: compact the conversation's context now (docs/compaction-and-replay.md).

The client sends a ``conversation.compact`` input (like ``cancel`` and ``resume``) and waits for
what the conversation makes of it: a ``conversation.compaction.completed`` (or ``.failed``) entry,
or a ``conversation.error`` ``nothing_to_compact``. While a turn runs, the compaction happens
before the turn's next model call, so the wait lasts until then.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from pydantic import BaseModel, ConfigDict

from jidocode.shared.envelope import Envelope
from jidocode.shared.errors import RequestTimeout
from jidocode.shared.events.conversation import (
    CompactionCompleted,
    CompactionFailed,
    ConversationError,
)

__all__ = ["CompactionResult", "wait_for_compaction"]

Listener = Callable[[Envelope], Awaitable[None]]


class CompactionResult(BaseModel):
    """What ``compact()`` did: ``compacted`` False when there was nothing to summarise."""

    model_config = ConfigDict(frozen=True)

    compacted: bool
    #: Context size before and after (tokens), and how many context messages the summary replaced.
    tokens_before: int = 0
    tokens_after: int = 0
    messages: int = 0
    summary: str = ""
    model: str = ""
    #: Why nothing was compacted (``compacted`` False).
    message: str = ""


async def wait_for_compaction(
    listeners: list[Listener],
    send: Callable[[], Awaitable[str]],
    *,
    timeout: float | None,
) -> CompactionResult:
    """Send (``send`` returns the event id) and wait for the conversation's answer to it.

    A failed summary call returns ``compacted=False`` with the failure in ``message`` (the
    context stays as it was); ``RequestTimeout`` after ``timeout`` seconds.
    """
    done: asyncio.Future[CompactionResult] = asyncio.get_running_loop().create_future()
    sent: list[str] = []

    async def listen(env: Envelope) -> None:
        data: dict[str, Any] = env.data if isinstance(env.data, dict) else {}
        result: CompactionResult | None = None
        if env.type == CompactionCompleted.TYPE:
            result = CompactionResult(
                compacted=True,
                tokens_before=int(data.get("tokens_before") or 0),
                tokens_after=int(data.get("tokens_after") or 0),
                messages=int(data.get("messages") or 0),
                summary=str(data.get("summary") or ""),
                model=str(data.get("model") or ""),
            )
        elif env.type == CompactionFailed.TYPE:
            result = CompactionResult(
                compacted=False, message=f"{data.get('error_type')}: {data.get('message')}"
            )
        elif (
            env.type == ConversationError.TYPE
            and data.get("error_type") == "nothing_to_compact"
            and env.correlation_id in sent
        ):
            result = CompactionResult(compacted=False, message=str(data.get("message") or ""))
        if result is not None and not done.done():
            done.set_result(result)

    listeners.append(listen)
    try:
        sent.append(await send())
        try:
            return await asyncio.wait_for(done, timeout)
        except TimeoutError:
            raise RequestTimeout(f"the compaction did not end within {timeout:g} s") from None
    finally:
        listeners.remove(listen)
