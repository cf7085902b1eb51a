"""`jidocode watch --tree` against a real nats-server: a turn's ``conversation.turn.ended`` ends its tree."""

from __future__ import annotations

import asyncio
import os
import sys

from jidocode.shared import subjects
from jidocode.shared.bus import Bus
from jidocode.shared.envelope import Envelope, new_id, now_iso

#: Generous: both cores may be busy with other tests.
DEADLINE = 60.0


def _event(type_: str, correlation: str, **data: object) -> Envelope:
    return Envelope(
        id=new_id(),
        source="test",
        type=type_,
        data=dict(data),
        time=now_iso(),
        extensions={"projectid": "P1", "conversationid": "C1", "correlationid": correlation},
    )


async def test_watch_tree_prints_the_turn_end_as_the_turns_last_line(bus: Bus, nats_server: str) -> None:
    await bus.ensure_stream(subjects.STREAM_EVENTS, [subjects.conversation_out_filter()])
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "jidocode.cli.main",
        "watch",
        "--tree",
        env={**os.environ, "NATS_URL": nats_server, "NO_COLOR": "1"},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    assert proc.stdout is not None and proc.stderr is not None
    try:
        # "watching …" comes once the live subscription is on the server.
        line = await asyncio.wait_for(proc.stderr.readline(), DEADLINE)
        assert b"watching" in line, line
        turn = [
            _event("conversation.user.message", "m1", text="hi"),
            _event("conversation.assistant.message", "m1", text="hello", request_id="r1"),
            _event("conversation.turn.ended", "m1", outcome="completed", message_ids=["m1"], turns=1),
            _event("conversation.user.message", "m2", text="next"),  # where to stop reading
        ]
        for env in turn:
            await bus.js_publish(subjects.conversation_out("P1", "C1", env.type), env)
        out: list[str] = []
        while not out or "turn m2" not in out[-1]:
            raw = await asyncio.wait_for(proc.stdout.readline(), DEADLINE)
            assert raw, f"watch ended before the next turn; printed {out}"
            out.append(raw.decode().rstrip("\n"))
    finally:
        if proc.returncode is None:
            proc.terminate()
        await asyncio.wait_for(proc.wait(), DEADLINE)
    assert out == [
        "● conversation C1 (project P1)",
        '  ▸ turn m1: "hi"',
        '    ├ answer: "hello"',
        "    └ turn ended: completed · 1 model call",
        '  ▸ turn m2: "next"',
    ]
