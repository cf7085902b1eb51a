"""The loop's notices (:mod:`jidocode.services.prd.notify`): a webhook receiver on 127.0.0.1 (a 2xx
is sent, anything else, a redirect or no answer in time is a failure line, never an exception),
hooks not listening for the state are not sent, and a command hook runs in the real sandbox with
the notice as its arguments."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from jidocode.services.prd.config import NotifyHook
from jidocode.services.prd.notify import Notice, send_notices

NOTICE = Notice(project_id="p1", prd="auth", state="error", reason="story US-001 failed: `rm -rf /`")


class Receiver:
    """``/ok`` answers 200, ``/fail`` 500, ``/moved`` a redirect, ``/hang`` never."""

    def __init__(self) -> None:
        self.posts: list[tuple[str, dict[str, Any]]] = []
        self.never = asyncio.Event()
        self.url = ""

    async def on_post(self, request: web.Request) -> web.StreamResponse:
        self.posts.append((request.path, await request.json()))
        if request.path == "/fail":
            return web.Response(status=500, text="down")
        if request.path == "/moved":
            raise web.HTTPFound("/ok")
        if request.path == "/hang":
            await self.never.wait()
        return web.json_response({"ok": True})


@pytest.fixture
async def got() -> AsyncIterator[Receiver]:
    receiver = Receiver()
    app = web.Application()
    app.router.add_post("/{name}", receiver.on_post)
    runner = web.AppRunner(app, shutdown_timeout=0.1)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    host, port = runner.addresses[0][:2]
    receiver.url = f"http://{host}:{port}"
    try:
        yield receiver
    finally:
        receiver.never.set()
        with contextlib.suppress(Exception):
            await runner.cleanup()


async def test_a_webhook_gets_the_notice_as_json(got: Receiver) -> None:
    assert await send_notices([NotifyHook(url=f"{got.url}/ok")], NOTICE) == []
    [(path, body)] = got.posts
    assert path == "/ok"
    assert body == {
        "type": "prd.notice",
        "project_id": "p1",
        "prd": "auth",
        "state": "error",
        "reason": NOTICE.reason,
        "story_id": "",
        "branch": "",
        "work_dir": "",
        "iterations": 0,
        "cost_usd": 0.0,
    }


async def test_failing_webhooks_are_lines_never_exceptions(got: Receiver) -> None:
    hooks = [
        NotifyHook(url=f"{got.url}/fail"),
        NotifyHook(url=f"{got.url}/moved"),
        NotifyHook(url=f"{got.url}/hang", timeout_s=0.5),
        NotifyHook(url="http://127.0.0.1:9/refused"),
        NotifyHook(url=f"{got.url}/ok"),
    ]
    failures = await send_notices(hooks, NOTICE)
    assert len(failures) == 4, failures
    assert failures[0].startswith(f"notify[0] ({got.url}/fail): answered 500")
    assert "answered 302 (a redirect, not followed)" in failures[1]
    assert "no answer within 0.5 s" in failures[2]
    assert failures[3].startswith("notify[3] (http://127.0.0.1:9/refused): ConnectError")
    # every hook was tried, in order, and the redirect was not followed
    assert [p for p, _ in got.posts] == ["/fail", "/moved", "/hang", "/ok"]


async def test_a_hook_not_listening_for_the_state_is_not_sent(got: Receiver) -> None:
    hooks = [NotifyHook(url=f"{got.url}/ok", on=["completed"]), NotifyHook(url=f"{got.url}/ok", on=["error"])]
    assert await send_notices(hooks, NOTICE) == []
    assert len(got.posts) == 1


@pytest.mark.usefixtures("jido_home")
async def test_a_command_hook_runs_in_the_sandbox_with_the_notice_as_arguments(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    notice = Notice(
        project_id="p1",
        prd="auth",
        state="completed",
        reason="$(touch pwned) every story",
        work_dir=str(work),
    )
    command = NotifyHook(command='printf "%s|%s|%s|%s" "$0" "$1" "$2" "$3" > notice.txt')
    assert await send_notices([command], notice) == []
    assert (work / "notice.txt").read_text() == "notify|completed|auth|$(touch pwned) every story"
    assert not (work / "pwned").exists()  # the reason is an argument, never command text

    failing = await send_notices([NotifyHook(command="echo nope >&2; exit 3")], notice)
    assert failing == ["notify[0] (command): exit 3: nope"]
