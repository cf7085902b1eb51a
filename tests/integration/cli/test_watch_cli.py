"""`jidocode watch` against a real nats-server: each event once with its subject; --since replays.

One event travels on several subjects with the same id (conversation input,
journal, output); the watcher must print it once. Stored output (stream
``JIDO_EVENTS``) is replayed in stream order after the given event, then the
watcher goes on live without doubling anything at the seam.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from typing import Any

from jidocode.shared import subjects
from jidocode.shared.bus import Bus
from jidocode.shared.envelope import Envelope, new_id, now_iso
from jidocode.shared.events.engine import ProjectStarted

#: Generous: both cores may be busy with other tests.
DEADLINE = 60.0


def _event(text: str) -> Envelope:
    return Envelope(
        id=new_id(),
        source="test",
        type="conversation.user.message",
        data={"text": text},
        time=now_iso(),
        extensions={"projectid": "P1", "conversationid": "C1"},
    )


async def _start_watch(nats_server: str, *args: str) -> asyncio.subprocess.Process:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "jidocode.cli.main",
        "watch",
        "--json",
        *args,
        env={**os.environ, "NATS_URL": nats_server},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    assert proc.stderr is not None
    # "watching …" comes once the live subscription is on the server.
    line = await asyncio.wait_for(proc.stderr.readline(), DEADLINE)
    assert b"watching" in line, line
    return proc


async def _read_until(proc: asyncio.subprocess.Process, last_id: str) -> list[dict[str, Any]]:
    assert proc.stdout is not None
    out: list[dict[str, Any]] = []
    while not out or out[-1]["id"] != last_id:
        line = await asyncio.wait_for(proc.stdout.readline(), DEADLINE)
        assert line, "watch ended before printing the last event"
        out.append(json.loads(line))
    return out


async def _stop(proc: asyncio.subprocess.Process) -> None:
    if proc.returncode is None:
        proc.terminate()
    await asyncio.wait_for(proc.wait(), DEADLINE)


async def test_an_event_on_three_subjects_is_printed_once_with_the_first_subject(
    bus: Bus, nats_server: str
) -> None:
    await bus.ensure_stream(subjects.STREAM_EVENTS, [subjects.conversation_out_filter()])
    proc = await _start_watch(nats_server)
    try:
        env = _event("hello")
        # what the conversation service does with one user message
        await bus.publish_envelope(subjects.conversation_in("P1", "C1"), env)
        await bus.publish_envelope(subjects.journal("P1", "C1"), env)
        await bus.js_publish(subjects.conversation_out("P1", "C1", env.type), env)
        sentinel = await bus.publish(
            subjects.signal("project.started"), ProjectStarted(project_id="P1", root_path="/r")
        )
        seen = await _read_until(proc, sentinel.id)
    finally:
        await _stop(proc)
    assert [(e["id"], e["subject"]) for e in seen] == [
        (env.id, subjects.conversation_in("P1", "C1")),
        (sentinel.id, subjects.signal("project.started")),
    ]


async def test_since_an_event_replays_the_stored_ones_after_it_in_order_then_goes_on_live(
    bus: Bus, nats_server: str
) -> None:
    await bus.ensure_stream(subjects.STREAM_EVENTS, [subjects.conversation_out_filter()])
    stored = [_event(f"m{i}") for i in range(4)]
    for env in stored:
        await bus.js_publish(subjects.conversation_out("P1", "C1", env.type), env)
    # signals are not stored: not replayed
    await bus.publish(subjects.signal("project.started"), ProjectStarted(project_id="P1", root_path="/r"))
    proc = await _start_watch(nats_server, "--since", stored[0].id)
    try:
        live = _event("live")
        # stored and published on the core subject at once: the replay or the live
        # subscription may both see it, it must show once
        await bus.js_publish(subjects.conversation_out("P1", "C1", live.type), live)
        seen = await _read_until(proc, live.id)
        sentinel = await bus.publish(
            subjects.signal("project.started"), ProjectStarted(project_id="P1", root_path="/r")
        )
        seen += await _read_until(proc, sentinel.id)
    finally:
        await _stop(proc)
    assert [e["id"] for e in seen] == [e.id for e in stored[1:]] + [live.id, sentinel.id]
    assert all(
        e["subject"] == subjects.conversation_out("P1", "C1", "conversation.user.message") for e in seen[:-1]
    )
    assert [e["data"]["text"] for e in seen[:-1]] == ["m1", "m2", "m3", "live"]


async def test_since_a_time_replays_what_was_stored_since(bus: Bus, nats_server: str) -> None:
    await bus.ensure_stream(subjects.STREAM_EVENTS, [subjects.conversation_out_filter()])
    stored = [_event(f"t{i}") for i in range(3)]
    for env in stored:
        await bus.js_publish(subjects.conversation_out("P1", "C1", env.type), env)
    proc = await _start_watch(nats_server, "--since", "1h", "--limit", "3")
    try:
        seen = await _read_until(proc, stored[-1].id)
        assert await asyncio.wait_for(proc.wait(), DEADLINE) == 0
    finally:
        await _stop(proc)
    assert [e["id"] for e in seen] == [e.id for e in stored]


async def test_since_an_unknown_event_says_it_is_not_stored(bus: Bus, nats_server: str) -> None:
    await bus.ensure_stream(subjects.STREAM_EVENTS, [subjects.conversation_out_filter()])
    await bus.js_publish(subjects.conversation_out("P1", "C1", "conversation.user.message"), _event("x"))
    proc = await _start_watch(nats_server, "--since", "no-such-event")
    assert proc.stderr is not None
    rest = await asyncio.wait_for(proc.stderr.read(), DEADLINE)
    assert await asyncio.wait_for(proc.wait(), DEADLINE) == 2
    assert b"not_found" in rest and b"no-such-event" in rest
