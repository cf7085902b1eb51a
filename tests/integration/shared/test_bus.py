"""The bus client and the micro service host over a real nats-server."""

from __future__ import annotations

import asyncio
import json

import pytest

from jidocode.shared import subjects
from jidocode.shared.bus import Bus, gather
from jidocode.shared.config import Config
from jidocode.shared.envelope import Envelope, encode_binary
from jidocode.shared.errors import InvalidInput, NotFound, RequestTimeout, ServiceUnavailable
from jidocode.shared.events.engine import ListProjects, ProjectStarted, StartProject, WhereisProject
from jidocode.shared.service import ServiceHost, expect, scoped_project_id


@pytest.fixture
async def host_bus(config: Config):
    b = await Bus.connect(config, "engine")
    yield b
    await b.close()


async def _host(bus: Bus, **endpoints) -> ServiceHost:
    host = ServiceHost(bus, name="engine")
    for name, (subject, handler) in endpoints.items():
        host.add_endpoint(name, subject=subject, handler=handler)
    await host.start()
    return host


async def test_reply_result_and_typed_error(bus: Bus, host_bus: Bus) -> None:
    async def ok(env: Envelope) -> dict[str, str]:
        cmd = expect(env, StartProject)
        return {"root": cmd.root_path, "corr": env.correlation_id or ""}

    async def missing(env: Envelope) -> None:
        raise NotFound("unknown project id 'X'", details={"project_id": "X"})

    await _host(host_bus, ok=("t.ok", ok), missing=("t.missing", missing))
    assert await bus.request("t.ok", StartProject(root_path="/r"), correlation_id="K1") == {
        "root": "/r",
        "corr": "K1",
    }
    with pytest.raises(NotFound, match="unknown project id") as info:
        await bus.request("t.missing", ListProjects())
    assert info.value.details == {"project_id": "X"}
    reply = await bus.request_envelope("t.ok", StartProject(root_path="/r"), correlation_id="K2")
    assert reply.correlation_id == "K2" and reply.causation_id is not None


async def test_no_responder_is_a_clear_error_not_a_timeout(bus: Bus) -> None:
    with pytest.raises(ServiceUnavailable, match="jidocode up"):
        await bus.request(subjects.engine("list_projects"), ListProjects(), timeout=5)


async def test_slow_handler_times_out_as_request_timeout(bus: Bus, host_bus: Bus) -> None:
    release = asyncio.Event()

    async def slow(env: Envelope) -> None:
        await release.wait()

    await _host(host_bus, slow=("t.slow", slow))
    try:
        with pytest.raises(RequestTimeout, match=r"within 0\.2 s"):
            await bus.request("t.slow", ListProjects(), timeout=0.2)
    finally:
        release.set()


async def test_unexpected_exception_becomes_internal_error_reply(bus: Bus, host_bus: Bus) -> None:
    async def boom(env: Envelope) -> None:
        raise RuntimeError("kaput")

    await _host(host_bus, boom=("t.boom", boom))
    with pytest.raises(Exception, match="internal error in boom: RuntimeError: kaput") as info:
        await bus.request("t.boom", ListProjects())
    assert getattr(info.value, "type", None) == "internal"


async def test_binary_mode_request_is_accepted(bus: Bus, host_bus: Bus) -> None:
    async def echo(env: Envelope) -> dict[str, str]:
        return {"type": env.type, "project": env.project_id or ""}

    await _host(host_bus, echo=("t.echo", echo))
    env = Envelope.new(ListProjects(), source="other/1", project_id="P9")
    body, headers = encode_binary(env)
    msg = await bus.nc.request("t.echo", body, headers=headers, timeout=2)
    assert json.loads(msg.data)["data"]["result"] == {"type": "engine.list_projects", "project": "P9"}


async def test_scoped_project_id_refuses_a_spoofed_extension(bus: Bus, host_bus: Bus) -> None:
    async def which(env: Envelope) -> str:
        return scoped_project_id(env)

    await _host(host_bus, which=(subjects.project_pattern("which"), which))
    assert await bus.request(subjects.project("PA", "which"), ListProjects()) == "PA"
    with pytest.raises(InvalidInput, match="does not match the subject"):
        await bus.request(subjects.project("PA", "which"), ListProjects(), project_id="PB")


async def test_micro_discovery_finds_endpoints_and_counts_requests(bus: Bus, host_bus: Bus) -> None:
    async def ok(env: Envelope) -> int:
        return 1

    await _host(host_bus, ok=("t.ok2", ok))
    for _ in range(3):
        await bus.request("t.ok2", ListProjects())
    [ping] = [json.loads(m.data) for m in await gather(bus.nc, subjects.srv("PING", "engine"))]
    assert ping["name"] == "jidocode-engine" and ping["metadata"]["instance"] == host_bus.source
    [info] = [json.loads(m.data) for m in await gather(bus.nc, subjects.srv("INFO", "engine"))]
    assert (
        info["endpoints"][0]["subject"] == "t.ok2"
        and info["endpoints"][0]["queue_group"] == "jidocode-engine"
    )
    [stats] = [json.loads(m.data) for m in await gather(bus.nc, subjects.srv("STATS", "engine"))]
    assert stats["endpoints"][0]["num_requests"] == 3


async def test_jetstream_publish_dedupes_on_the_event_id(bus: Bus) -> None:
    await bus.ensure_stream("T_DEDUP", ["t.js.>"])
    await bus.ensure_stream("T_DEDUP", ["t.js.>"])  # idempotent
    env = bus.envelope(ProjectStarted(project_id="P", root_path="/r"))
    first = await bus.js_publish("t.js.a", env)
    again = await bus.js_publish("t.js.a", env)  # a retry after a lost ack
    assert first == again
    info = await bus.js.stream_info("T_DEDUP")
    assert info.state.messages == 1
    await bus.ensure_stream("T_DEDUP", ["t.js.>", "t.more.>"])  # a changed config is an update
    assert (await bus.js.stream_info("T_DEDUP")).config.subjects == ["t.js.>", "t.more.>"]


async def test_kv_is_created_once_and_shared(bus: Bus, config: Config) -> None:
    other = await Bus.connect(config, "other")
    try:
        kv1, kv2 = await asyncio.gather(bus.kv("t_bucket"), other.kv("t_bucket"))
        await kv1.put("k", b"v")
        assert (await kv2.get("k")).value == b"v"
    finally:
        await other.close()


async def test_subscribe_rejects_garbage_with_an_error_reply(bus: Bus) -> None:
    got: asyncio.Queue[Envelope] = asyncio.Queue()
    await bus.subscribe("t.sub", got.put)
    reply = await bus.nc.request("t.sub", b'{"id":"1"}', timeout=2)
    assert json.loads(reply.data)["data"]["type"] == "invalid_envelope"
    await bus.publish("t.sub", WhereisProject(project_id="P"), project_id="P")
    env = await asyncio.wait_for(got.get(), 2)
    assert env.nats_subject == "t.sub" and env.event() == WhereisProject(project_id="P")


async def test_close_drains_an_in_flight_request(bus: Bus, config: Config) -> None:
    service_bus = await Bus.connect(config, "engine")
    started = asyncio.Event()
    release = asyncio.Event()

    async def slow(env: Envelope) -> str:
        started.set()
        await release.wait()
        return "done"

    await _host(service_bus, slow=("t.drain", slow))
    pending = asyncio.create_task(bus.request("t.drain", ListProjects(), timeout=5))
    await asyncio.wait_for(started.wait(), 5)
    closing = asyncio.create_task(service_bus.close())
    release.set()
    assert await pending == "done"
    await asyncio.wait_for(closing, 10)
    assert service_bus.nc.is_closed


async def test_connect_to_nothing_says_how_to_start() -> None:
    from jidocode.shared.natsserver import free_port

    with pytest.raises(ServiceUnavailable, match="jidocode up"):
        await Bus.connect(Config(nats_url=f"nats://127.0.0.1:{free_port()}"), "x", wait=False)


async def test_requests_are_served_concurrently_and_bounded(bus: Bus, config: Config) -> None:
    service_bus = await Bus.connect(config, "engine")
    release = asyncio.Event()
    entered = 0

    async def slow(env: Envelope) -> str:
        nonlocal entered
        entered += 1
        await release.wait()
        return "slow"

    async def fast(env: Envelope) -> str:
        return "fast"

    host = ServiceHost(service_bus, name="engine", max_concurrent=2)
    host.add_endpoint("slow", subject="t.c.slow", handler=slow)
    host.add_endpoint("fast", subject="t.c.fast", handler=fast)
    await host.start()
    try:
        first = asyncio.create_task(bus.request("t.c.slow", ListProjects(), timeout=10))
        # a slow request does not hold up another one
        assert await bus.request("t.c.fast", ListProjects(), timeout=5) == "fast"
        second = asyncio.create_task(bus.request("t.c.slow", ListProjects(), timeout=10))
        # the bound: with two slow requests in flight, a third waits for a slot
        third = asyncio.create_task(bus.request("t.c.fast", ListProjects(), timeout=10))
        done, _ = await asyncio.wait({third}, timeout=0.5)
        assert not done and host.inflight == 2 and entered == 2
        release.set()
        assert await asyncio.gather(first, second, third) == ["slow", "slow", "fast"]
    finally:
        release.set()
        await host.stop()
        await service_bus.close()


def test_host_limits_are_validated_before_any_io() -> None:
    class _NoBus:
        source = "x/1"

    with pytest.raises(ValueError, match="max_concurrent"):
        ServiceHost(_NoBus(), name="engine", max_concurrent=0)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="unknown service"):
        ServiceHost(_NoBus(), name="nope")  # type: ignore[arg-type]


async def test_jetstream_publish_rides_out_a_missing_stream_then_gives_up_clearly(bus: Bus) -> None:
    env = bus.envelope(ProjectStarted(project_id="P", root_path="/r"))
    # no stream yet (as during a leader election): the publish keeps retrying ...
    publishing = asyncio.create_task(bus.js_publish("t.late.x", env, timeout=0.5, deadline=30))
    done, _ = await asyncio.wait({publishing}, timeout=0.3)
    assert not done
    await bus.ensure_stream("T_LATE", ["t.late.>"])
    # ... and lands once the stream answers
    assert await asyncio.wait_for(publishing, 30) == 1
    with pytest.raises(RequestTimeout, match=r"did not acknowledge .* \(NoStreamResponseError\)"):
        await bus.js_publish("t.nostream.x", env, timeout=0.2, deadline=0.5)
