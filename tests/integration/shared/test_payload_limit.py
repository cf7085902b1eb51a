"""One payload limit on the bus (``MAX_PAYLOAD_BYTES``), over a real nats-server: a request at
the limit is served, one byte over is refused naming its size and the limit, JidoCode's own
senders refuse before publishing, and a reply over the limit is an error reply, not a silence."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import orjson
import pytest
from nats.aio.msg import Msg

from jidocode.shared.bus import Bus
from jidocode.shared.config import Config
from jidocode.shared.envelope import MAX_PAYLOAD_BYTES, Envelope, encode_event
from jidocode.shared.errors import PayloadTooLarge
from jidocode.shared.events.tools import RunTool, ToolCallMeta, ToolResult
from jidocode.shared.service import ServiceHost


@pytest.fixture
async def host_bus(config: Config) -> AsyncIterator[Bus]:
    b = await Bus.connect(config, "tool_runner")
    yield b
    await b.close()


@pytest.fixture
async def served(host_bus: Bus) -> AsyncIterator[list[RunTool]]:
    """A tool-runner host on ``t.limit`` that echoes the size of what it got; the calls it saw."""
    seen: list[RunTool] = []

    async def run(cmd: RunTool, env: Envelope) -> ToolResult:
        seen.append(cmd)
        if cmd.name == "huge_reply":
            return ToolResult(ok=True, data="x" * MAX_PAYLOAD_BYTES)
        return ToolResult(ok=True, data={"content_chars": len(cmd.args["content"])})

    host = ServiceHost(host_bus, name="tool_runner")
    host.endpoint(RunTool, "t.limit", run)
    await host.start()
    yield seen
    await host.stop()


def _run(content: str, name: str = "write_file") -> RunTool:
    return RunTool(name=name, args={"content": content}, meta=ToolCallMeta(request_id="r1"))


def _request_of(size: int, source: str) -> bytes:
    """A structured-mode ``tool.run`` request of exactly ``size`` bytes, as any client would send it."""
    empty = len(encode_event(_run(""), source=source, id="01J")[1])
    raw = encode_event(_run("x" * (MAX_PAYLOAD_BYTES - empty)), source=source, id="01J")[1]
    event = orjson.loads(raw)
    event["data"]["args"]["content"] += "x" * (size - MAX_PAYLOAD_BYTES)
    payload = orjson.dumps(event)
    assert len(payload) == size
    return payload


async def _reply(bus: Bus, payload: bytes) -> dict[str, Any]:
    msg: Msg = await bus.nc.request("t.limit", payload, timeout=30)
    reply: dict[str, Any] = orjson.loads(msg.data)
    return reply


async def test_the_server_carries_more_than_the_limit(bus: Bus) -> None:
    # NATS counts headers in max_payload: the bus limit leaves room for them
    assert bus.nc.max_payload >= MAX_PAYLOAD_BYTES + 16 * 1024


async def test_a_request_at_the_limit_is_served_and_one_byte_over_is_refused(
    bus: Bus, served: list[RunTool]
) -> None:
    at = await _reply(bus, _request_of(MAX_PAYLOAD_BYTES, bus.source))
    assert at["type"] == "tool.result" and at["data"]["ok"]
    assert at["data"]["data"]["content_chars"] == len(served[0].args["content"]) > 900_000

    over = await _reply(bus, _request_of(MAX_PAYLOAD_BYTES + 1, bus.source))
    assert over["type"] == "error"
    error = over["data"]
    assert error["type"] == "payload_too_large" and not error["retryable"]
    assert error["details"] == {"size": MAX_PAYLOAD_BYTES + 1, "limit": MAX_PAYLOAD_BYTES}
    assert f"{MAX_PAYLOAD_BYTES + 1} bytes" in error["message"] and str(MAX_PAYLOAD_BYTES) in error["message"]
    assert len(served) == 1  # the handler never saw it


async def test_the_sender_refuses_a_request_over_the_limit_before_publishing(bus: Bus) -> None:
    sniffed: list[Msg] = []
    marker = asyncio.Event()

    async def sniff(msg: Msg) -> None:
        sniffed.append(msg)
        if msg.data == b"marker":
            marker.set()

    sub = await bus.nc.subscribe("t.sniff", cb=sniff)
    await bus.nc.flush()
    empty = len(encode_event(_run(""), source=bus.source)[1])
    with pytest.raises(PayloadTooLarge) as info:
        await bus.call("t.sniff", _run("x" * MAX_PAYLOAD_BYTES))
    size = info.value.details["size"]
    assert size > MAX_PAYLOAD_BYTES and info.value.details["limit"] == MAX_PAYLOAD_BYTES
    assert abs(size - (empty + MAX_PAYLOAD_BYTES)) < 64  # its own size (ids and times vary little)
    assert f"of {size} bytes is over the limit of {MAX_PAYLOAD_BYTES} bytes" in info.value.message
    # one connection keeps its order: had the request gone out, it would arrive before the marker
    await bus.nc.publish("t.sniff", b"marker")
    await asyncio.wait_for(marker.wait(), 30)
    assert [m.data for m in sniffed] == [b"marker"]
    await sub.unsubscribe()

    # the same holds for events and JetStream publishes, which go through the same encoder
    with pytest.raises(PayloadTooLarge):
        await bus.publish("t.sniff", ToolResult(ok=True, data="x" * MAX_PAYLOAD_BYTES))


async def test_a_reply_over_the_limit_is_a_payload_too_large_error(bus: Bus, served: list[RunTool]) -> None:
    with pytest.raises(PayloadTooLarge, match=r"'tool\.result' event of \d+ bytes is over the limit") as info:
        await bus.call("t.limit", _run("", name="huge_reply"), timeout=30)
    assert info.value.details["limit"] == MAX_PAYLOAD_BYTES and info.value.details["type"] == "tool.result"


async def test_a_service_takes_at_most_the_bus_limit(host_bus: Bus) -> None:
    for bad in (0, MAX_PAYLOAD_BYTES + 1):
        with pytest.raises(ValueError, match=f"max_request_bytes must be 1 to {MAX_PAYLOAD_BYTES}"):
            ServiceHost(host_bus, name="tool_runner", max_request_bytes=bad)
    assert ServiceHost(host_bus, name="tool_runner").max_request_bytes == MAX_PAYLOAD_BYTES
