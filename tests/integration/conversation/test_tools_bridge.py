"""The NATS ToolPort against a responder on the real tool-runner subjects."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from typing import Any

from jidocode.services.conversation.tools_bridge import NatsToolPort, list_tool_specs
from jidocode.shared import subjects
from jidocode.shared.bus import Bus
from jidocode.shared.envelope import Envelope, encode
from jidocode.shared.errors import ServiceUnavailable
from jidocode.shared.events.tools import ToolCallMeta, ToolCancelAccepted, ToolCatalog, ToolResult, ToolSpec

from ._support import P

META = ToolCallMeta(conversation_id="c", request_id="r1", correlation_id="k", causation_id="r1")


async def test_run_and_cancel_round_trip(bus: Bus) -> None:
    seen: list[dict[str, Any]] = []

    async def _run(msg: Any) -> None:
        body = json.loads(msg.data)
        seen.append(body)
        result = ToolResult(ok=True, data={"echo": body["data"]["args"]})
        await msg.respond(encode(Envelope.new(result, source="test/tools"))[0])

    async def _cancel(msg: Any) -> None:
        body = json.loads(msg.data)
        seen.append(body)
        accepted = ToolCancelAccepted(request_id=body["data"]["request_id"])
        await msg.respond(encode(Envelope.new(accepted, source="test/tools"))[0])

    await bus.nc.subscribe(subjects.tools(P, "run"), cb=_run)
    await bus.nc.subscribe(subjects.tools(P, "cancel"), cb=_cancel)
    port = NatsToolPort(bus, timeout=5)
    result = await port.run(P, "read_file", {"path": "a"}, META)
    assert result.ok and result.data == {"echo": {"path": "a"}}
    run = seen[0]
    assert run["type"] == "tool.run" and run["data"]["meta"]["request_id"] == "r1"
    assert run["correlationid"] == "k" and run["conversationid"] == "c"
    await port.cancel(P, "r1", "c")
    assert seen[1]["type"] == "tool.cancel"
    assert seen[1]["data"] == {"request_id": "r1", "conversation_id": "c"}  # only its owner cancels


async def test_no_tool_runner_is_a_failed_result_not_an_exception(bus: Bus) -> None:
    port = NatsToolPort(bus, timeout=1.5)
    result = await port.run("nobody", "bash", {}, META)
    assert not result.ok and result.error is not None and result.error.type == "service_unavailable"
    assert "within its deadline" in result.error.message
    await port.cancel("nobody", "r1")  # logged, never raised


async def test_a_call_waits_for_a_restarting_tool_runner_with_the_same_request_id(bus: Bus) -> None:
    # Nobody serves the project's run endpoint (a runner restarting): the call is sent again,
    # same request id, until a runner takes it — not turned into a failed result at once.
    waiting = asyncio.Event()

    class _Seen(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if "waits for one" in record.getMessage():
                waiting.set()

    handler = _Seen()
    logging.getLogger("jidocode.conversation.tools").addHandler(handler)
    try:
        port = NatsToolPort(bus, timeout=60)
        call = asyncio.ensure_future(port.run(P, "bash", {"command": "echo hi"}, META))
        await asyncio.wait_for(waiting.wait(), 30)
        assert not call.done()
        seen: list[dict[str, Any]] = []

        async def _run(msg: Any) -> None:
            body = json.loads(msg.data)
            seen.append(body)
            await msg.respond(encode(Envelope.new(ToolResult(ok=True, data="ran"), source="test/tools"))[0])

        await bus.nc.subscribe(subjects.tools(P, "run"), cb=_run)  # the runner is back
        result = await asyncio.wait_for(call, 30)
        assert result.ok and result.data == "ran"
        assert [body["data"]["meta"]["request_id"] for body in seen] == ["r1"]
    finally:
        logging.getLogger("jidocode.conversation.tools").removeHandler(handler)


async def test_a_call_nobody_answers_is_sent_again_with_the_same_request_id_and_deadline(bus: Bus) -> None:
    # A runner that dies holding the call (or a reply lost while NATS restarts) never answers: the
    # same request is sent again after a while, keeping the call's deadline, and the ledger of
    # whichever runner takes it answers once (here: the second copy is answered).
    seen: list[dict[str, Any]] = []

    async def _run(msg: Any) -> None:
        body = json.loads(msg.data)
        seen.append(body)
        if len(seen) == 1:
            return  # the runner holding the first copy died: no answer ever comes
        await msg.respond(encode(Envelope.new(ToolResult(ok=True, data="ran"), source="test/tools"))[0])

    await bus.nc.subscribe(subjects.tools(P, "run"), cb=_run)
    port = NatsToolPort(bus, timeout=30, resend_after=0.3)
    result = await asyncio.wait_for(port.run(P, "bash", {"command": "echo hi"}, META), 20)
    assert result.ok and result.data == "ran"
    metas = [body["data"]["meta"] for body in seen]
    assert [m["request_id"] for m in metas] == ["r1", "r1"]
    # the call's deadline (30 s away), not the 0.3 s wait of one attempt
    assert abs(metas[0]["deadline"] - metas[1]["deadline"]) < 2
    assert metas[1]["deadline"] - time.time() > 20


async def test_a_call_nobody_ever_answers_fails_at_its_deadline(bus: Bus) -> None:
    async def _run(msg: Any) -> None:
        return  # never answers

    await bus.nc.subscribe(subjects.tools(P, "run"), cb=_run)
    port = NatsToolPort(bus, timeout=1.0, resend_after=0.2)
    started = time.monotonic()
    result = await asyncio.wait_for(port.run(P, "bash", {"command": "echo hi"}, META), 20)
    assert not result.ok and result.error is not None and result.error.type == "timeout"
    assert 0.9 <= time.monotonic() - started < 5


async def test_list_tool_specs(bus: Bus) -> None:
    async def _list(msg: Any) -> None:
        catalog = ToolCatalog(
            tools=[ToolSpec(name="grep", description="search", input_schema={"type": "object"})]
        )
        await msg.respond(encode(Envelope.new(catalog, source="test/project"))[0])

    await bus.nc.subscribe(subjects.project(P, "list_tools"), cb=_list)
    [spec] = await list_tool_specs(bus, P)
    assert spec.name == "grep" and spec.description == "search"
    try:
        await list_tool_specs(bus, "nobody", timeout=10)
    except ServiceUnavailable:
        pass
    else:
        raise AssertionError("expected ServiceUnavailable")
