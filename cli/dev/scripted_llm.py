"""A scripted OpenAI-compatible chat-completions server on loopback.

Tests, demos and the benchmark drive the *real* litellm code path against it:
litellm speaks HTTP to ``/v1/chat/completions`` exactly as it would to a
provider, and this server answers from a script.

A script is a queue of :class:`Reply` values consumed one per request::

    server.script(Reply.tools(call("read_file", path="README.md")),
                  Reply.answer("It says hello."))

When the queue is empty the *responder* decides (a function of the request
body; by default a clear 500 "script exhausted" error, so a test never gets a
silently invented answer). Each reply can be a text answer (streamed in
chunks), tool calls (streamed as OpenAI does: id and name first, then the
arguments in pieces), or an HTTP error (429 with ``Retry-After``, 500, 401,
400 context overflow, 404 unknown model); a delay before the first byte and a
delay between chunks make slow responses. Every request is recorded
(:attr:`ScriptedLlm.requests`) and can be awaited (:meth:`wait_requests`),
so tests synchronise on events, never on sleeps.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import time
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

if TYPE_CHECKING:  # aiohttp is imported by what serves (0.1 s): `jidocode replay --help` does not pay it
    from aiohttp import web

__all__ = [
    "Reply",
    "Responder",
    "ScriptedLlm",
    "ScriptedToolCall",
    "call",
    "echo_responder",
    "exhausted_responder",
    "one_tool_responder",
]

_ids = itertools.count(1)


class ScriptedToolCall(BaseModel):
    model_config = ConfigDict(frozen=True)

    name: str
    arguments: dict[str, Any] = Field(default_factory=dict)
    id: str = Field(default_factory=lambda: f"call_{next(_ids)}")


def call(name: str, /, **arguments: Any) -> ScriptedToolCall:
    """A tool call to script: ``call("read_file", path="a.txt")``."""
    return ScriptedToolCall(name=name, arguments=arguments)


class Reply(BaseModel):
    """One scripted response."""

    model_config = ConfigDict(frozen=True)

    kind: Literal["text", "tool_calls", "error"] = "text"
    text: str = ""
    tool_calls: tuple[ScriptedToolCall, ...] = ()
    #: HTTP status of an error reply.
    status: int = 500
    error_message: str = "scripted error"
    error_code: str | None = None
    retry_after: float | None = None
    #: Seconds before the response starts.
    delay_s: float = 0.0
    #: Seconds between streamed chunks.
    chunk_delay_s: float = 0.0
    #: Characters per streamed text chunk.
    chunk_chars: int = 8
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cached_tokens: int = 0
    #: The model named in the response (default: the request's); a replay answers as the recording did.
    model: str | None = None

    @classmethod
    def answer(cls, text: str, **kw: Any) -> Reply:
        return cls(kind="text", text=text, **kw)

    @classmethod
    def tools(cls, *calls: ScriptedToolCall, text: str = "", **kw: Any) -> Reply:
        return cls(kind="tool_calls", tool_calls=tuple(calls), text=text, **kw)

    @classmethod
    def error(cls, status: int, message: str | None = None, **kw: Any) -> Reply:
        defaults = {
            401: ("Incorrect API key provided", "invalid_api_key"),
            404: ("The model does not exist", "model_not_found"),
            429: ("Rate limit reached, please retry", "rate_limit_exceeded"),
            500: ("The server had an error", None),
            503: ("The server is overloaded", None),
        }
        msg, code = defaults.get(status, ("scripted error", None))
        kw.setdefault("error_code", code)
        return cls(kind="error", status=status, error_message=message or msg, **kw)

    @classmethod
    def context_overflow(cls, **kw: Any) -> Reply:
        return cls.error(
            400,
            "This model's maximum context length is 8192 tokens. However, your messages resulted in "
            "9001 tokens. Please reduce the length of the messages.",
            error_code="context_length_exceeded",
            **kw,
        )


Responder = Callable[[dict[str, Any]], Reply]


def exhausted_responder(body: dict[str, Any]) -> Reply:
    """The default: an empty script is an error, never an invented answer."""
    return Reply.error(500, "scripted LLM: script exhausted (no reply queued for this request)")


def _last(body: dict[str, Any]) -> dict[str, Any]:
    messages = body.get("messages") or [{}]
    last = messages[-1]
    return last if isinstance(last, dict) else {}


def _content_text(message: dict[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, list):
        return " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return str(content or "")


def echo_responder(body: dict[str, Any]) -> Reply:
    """Answer every user message with ``echo: <message>`` (for demos)."""
    last = _last(body)
    if last.get("role") == "tool":
        return Reply.answer(f"tool said: {_content_text(last)[:200]}")
    return Reply.answer(f"echo: {_content_text(last)}")


def one_tool_responder(tool: str = "read_file", **arguments: Any) -> Responder:
    """A stateless turn of one tool call: user message -> ``tool(**arguments)``; tool result -> text.

    Safe under any concurrency (it reads only the request), which the
    benchmark's 200 concurrent conversations need.
    """

    def respond(body: dict[str, Any]) -> Reply:
        if _last(body).get("role") == "tool":
            return Reply.answer("done: " + _content_text(_last(body))[:40])
        return Reply.tools(call(tool, **arguments))

    return respond


class ScriptedLlm:
    """The server. ``async with ScriptedLlm() as llm: llm.api_base`` …"""

    def __init__(
        self,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        api_key: str | None = None,
        models: tuple[str, ...] = ("scripted",),
        responder: Responder = exhausted_responder,
    ) -> None:
        self.host = host
        self.port = port
        #: When set, requests without ``Authorization: Bearer <api_key>`` get a 401.
        self.api_key = api_key
        self.models = models
        self.responder = responder
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self._queue: deque[Reply] = deque()
        self._changed = asyncio.Condition()
        self._runner: web.AppRunner | None = None

    # -- scripting ------------------------------------------------------
    def script(self, *replies: Reply) -> None:
        """Append replies to the queue."""
        self._queue.extend(replies)

    @property
    def pending(self) -> int:
        """Replies still queued."""
        return len(self._queue)

    async def wait_requests(self, count: int, timeout: float = 10.0) -> list[dict[str, Any]]:
        """Wait until at least ``count`` requests were received; return them all."""

        async def _wait() -> None:
            async with self._changed:
                await self._changed.wait_for(lambda: len(self.requests) >= count)

        await asyncio.wait_for(_wait(), timeout)
        return list(self.requests)

    # -- lifecycle ------------------------------------------------------
    @property
    def api_base(self) -> str:
        return f"http://{self.host}:{self.port}/v1"

    async def start(self) -> ScriptedLlm:
        from aiohttp import web

        app = web.Application()
        app.router.add_post("/v1/chat/completions", self._completions)
        app.router.add_post("/chat/completions", self._completions)
        app.router.add_get("/v1/models", self._models)
        app.router.add_get("/models", self._models)
        # a reply still being delayed or streamed when the server stops is cut after 2 s
        # (aiohttp's default waits 60 s for it: a test whose client died mid-reply paid that)
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False, shutdown_timeout=2.0)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port)
        await site.start()
        server = site._server
        if server is not None and self.port == 0:
            sockets = getattr(server, "sockets", None) or []
            self.port = int(sockets[0].getsockname()[1])
        return self

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> ScriptedLlm:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    # -- handlers -------------------------------------------------------
    async def _models(self, request: web.Request) -> web.Response:
        from aiohttp import web

        return web.json_response(
            {
                "object": "list",
                "data": [{"id": m, "object": "model", "owned_by": "scripted"} for m in self.models],
            }
        )

    async def _record(self, body: dict[str, Any], headers: dict[str, str]) -> Reply:
        async with self._changed:
            self.requests.append(body)
            self.headers.append(headers)
            reply = self._queue.popleft() if self._queue else None
            self._changed.notify_all()
        return reply if reply is not None else self.responder(body)

    async def _completions(self, request: web.Request) -> web.StreamResponse:
        try:
            body = await request.json()
        except json.JSONDecodeError:
            return _error_response(Reply.error(400, "request body is not JSON"))
        if not isinstance(body, dict):
            return _error_response(Reply.error(400, "request body must be an object"))
        headers = {k.lower(): v for k, v in request.headers.items()}
        if self.api_key is not None and headers.get("authorization") != f"Bearer {self.api_key}":
            async with self._changed:
                self.requests.append(body)
                self.headers.append(headers)
                self._changed.notify_all()
            return _error_response(Reply.error(401))
        reply = await self._record(body, headers)
        if reply.delay_s > 0:
            await asyncio.sleep(reply.delay_s)
        if reply.kind == "error":
            return _error_response(reply)
        model = reply.model or str(body.get("model") or "scripted")
        usage = _usage(body, reply)
        if body.get("stream"):
            include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
            return await _stream(request, reply, model, usage if include_usage else None)
        from aiohttp import web

        return web.json_response(_full_response(reply, model, usage))


def _error_response(reply: Reply) -> web.Response:
    from aiohttp import web

    headers = {}
    if reply.retry_after is not None:
        headers["retry-after"] = str(reply.retry_after)
    error_type = {401: "invalid_request_error", 429: "rate_limit_error"}.get(reply.status, "server_error")
    if reply.status == 400 or reply.status == 404:
        error_type = "invalid_request_error"
    return web.json_response(
        {
            "error": {
                "message": reply.error_message,
                "type": error_type,
                "param": None,
                "code": reply.error_code,
            }
        },
        status=reply.status,
        headers=headers,
    )


def _approx_tokens(text: str) -> int:
    return max(1, len(text) // 4)


def _usage(body: dict[str, Any], reply: Reply) -> dict[str, Any]:
    prompt = reply.prompt_tokens
    if prompt is None:
        prompt = _approx_tokens(json.dumps(body.get("messages", [])))
    completion = reply.completion_tokens
    if completion is None:
        completion = _approx_tokens(reply.text + "".join(json.dumps(c.arguments) for c in reply.tool_calls))
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "prompt_tokens_details": {"cached_tokens": reply.cached_tokens},
    }


def _envelope(model: str, choices: list[dict[str, Any]], obj: str, rid: str) -> dict[str, Any]:
    return {"id": rid, "object": obj, "created": int(time.time()), "model": model, "choices": choices}


def _full_response(reply: Reply, model: str, usage: dict[str, Any]) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": reply.text or None}
    finish = "stop"
    if reply.kind == "tool_calls":
        finish = "tool_calls"
        message["tool_calls"] = [
            {
                "id": c.id,
                "type": "function",
                "function": {"name": c.name, "arguments": json.dumps(c.arguments)},
            }
            for c in reply.tool_calls
        ]
    body = _envelope(
        model,
        [{"index": 0, "message": message, "finish_reason": finish}],
        "chat.completion",
        f"chatcmpl-{next(_ids)}",
    )
    body["usage"] = usage
    return body


def _chunks(reply: Reply) -> list[dict[str, Any]]:
    """The ``delta``/``finish_reason`` pairs of a streamed reply, in order."""
    out: list[dict[str, Any]] = [{"delta": {"role": "assistant", "content": ""}, "finish_reason": None}]
    size = max(1, reply.chunk_chars)
    for i in range(0, len(reply.text), size):
        out.append({"delta": {"content": reply.text[i : i + size]}, "finish_reason": None})
    for index, c in enumerate(reply.tool_calls):
        head = {"index": index, "id": c.id, "type": "function", "function": {"name": c.name, "arguments": ""}}
        out.append({"delta": {"tool_calls": [head]}, "finish_reason": None})
        args = json.dumps(c.arguments)
        for i in range(0, len(args), size):
            piece = {"index": index, "function": {"arguments": args[i : i + size]}}
            out.append({"delta": {"tool_calls": [piece]}, "finish_reason": None})
    finish = "tool_calls" if reply.kind == "tool_calls" else "stop"
    out.append({"delta": {}, "finish_reason": finish})
    return out


async def _stream(
    request: web.Request, reply: Reply, model: str, usage: dict[str, Any] | None
) -> web.StreamResponse:
    from aiohttp import web

    response = web.StreamResponse(
        status=200, headers={"content-type": "text/event-stream", "cache-control": "no-cache"}
    )
    await response.prepare(request)
    rid = f"chatcmpl-{next(_ids)}"
    chunks = _chunks(reply)
    for n, piece in enumerate(chunks):
        if n and reply.chunk_delay_s > 0:
            await asyncio.sleep(reply.chunk_delay_s)
        choice = {"index": 0, **piece}
        data = _envelope(model, [choice], "chat.completion.chunk", rid)
        await response.write(f"data: {json.dumps(data)}\n\n".encode())
    if usage is not None:
        data = _envelope(model, [], "chat.completion.chunk", rid)
        data["usage"] = usage
        await response.write(f"data: {json.dumps(data)}\n\n".encode())
    await response.write(b"data: [DONE]\n\n")
    await response.write_eof()
    return response
