"""Reading the gateway's SSE streams from Python (the tests, ``bench/gateway.py``, scripts).

:func:`read_sse` turns the lines of a ``text/event-stream`` into
:class:`SseMessage` values, per the WHATWG rules the gateway's streams use:
``id``, ``event`` and ``data`` fields, a blank line ends a message, lines
starting with ``:`` are comments (keep-alives).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterable, AsyncIterator
from dataclasses import dataclass
from typing import Any

__all__ = ["SseMessage", "read_sse"]


@dataclass(frozen=True)
class SseMessage:
    event: str
    data: str
    id: str | None = None

    def json(self) -> Any:
        return json.loads(self.data)


async def read_sse(lines: AsyncIterable[str]) -> AsyncIterator[SseMessage]:
    """The messages of an SSE stream given its lines (``httpx.Response.aiter_lines()``)."""
    event, event_id = "message", None
    data: list[str] = []
    async for raw in lines:
        line = raw.rstrip("\r\n")
        if not line:
            if data:
                yield SseMessage(event=event, data="\n".join(data), id=event_id)
            event, data, event_id = "message", [], None
            continue
        if line.startswith(":"):
            continue
        name, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if name == "event":
            event = value
        elif name == "data":
            data.append(value)
        elif name == "id":
            event_id = value
