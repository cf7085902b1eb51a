"""A stand-in for a local Ollama over real HTTP: its model list and a streamed ``/api/chat`` answer.

The two requests JidoCode makes of an Ollama: ``GET /api/tags`` (is it there, which models:
``shared/llm_probe.py``) and, through litellm's ``ollama_chat/`` provider, ``POST /api/chat``
answered as Ollama streams it (one JSON object per line, the last with ``done`` and the counts).

It serves from a thread and an event loop of its own: litellm asks Ollama for the model's details
(``POST /api/show``) with a blocking request from inside the caller's event loop, which a server on
that same loop could never answer (the call then waited out litellm's 120 s timeout).
"""

from __future__ import annotations

import asyncio
import json
import threading
from typing import Any

from aiohttp import web

__all__ = ["FakeOllama"]


class FakeOllama:
    """An Ollama on a loopback port: ``/api/tags`` lists ``models``; ``/api/chat`` streams ``answer``."""

    def __init__(self, models: list[str], answer: str) -> None:
        self.models = models
        self.answer = answer
        self.chats: list[dict[str, Any]] = []
        self._runner: web.AppRunner | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self.url = ""

    async def _tags(self, _: web.Request) -> web.Response:
        return web.json_response({"models": [{"name": m, "model": m} for m in self.models]})

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.chats.append(body)
        response = web.StreamResponse(headers={"Content-Type": "application/x-ndjson"})
        await response.prepare(request)
        lines = [
            {"model": body["model"], "message": {"role": "assistant", "content": self.answer}, "done": False},
            {
                "model": body["model"],
                "message": {"role": "assistant", "content": ""},
                "done": True,
                "done_reason": "stop",
                "prompt_eval_count": 7,
                "eval_count": 3,
            },
        ]
        for line in lines:
            await response.write((json.dumps(line) + "\n").encode())
        await response.write_eof()
        return response

    async def _show(self, _: web.Request) -> web.Response:
        return web.json_response(
            {"details": {}, "model_info": {}, "template": "", "capabilities": ["completion"]}
        )

    async def _start(self) -> None:
        app = web.Application()
        app.router.add_get("/api/tags", self._tags)
        app.router.add_post("/api/chat", self._chat)
        app.router.add_post("/api/show", self._show)
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.url = f"http://127.0.0.1:{port}"

    async def __aenter__(self) -> FakeOllama:
        loop = self._loop = asyncio.new_event_loop()
        started = asyncio.run_coroutine_threadsafe(self._start(), loop)
        self._thread = threading.Thread(target=loop.run_forever, name="fake-ollama", daemon=True)
        self._thread.start()
        await asyncio.wait_for(asyncio.wrap_future(started), 30)
        return self

    async def __aexit__(self, *exc: object) -> None:
        loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return
        if self._runner is not None:
            await asyncio.wait_for(
                asyncio.wrap_future(asyncio.run_coroutine_threadsafe(self._runner.cleanup(), loop)), 30
            )
        loop.call_soon_threadsafe(loop.stop)
        await asyncio.to_thread(thread.join, 30)
        loop.close()
