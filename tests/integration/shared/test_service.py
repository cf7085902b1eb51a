"""The micro service host over a real nats-server: typed endpoints and their middleware."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import nats.errors
import pytest
from nats.aio.msg import Msg

from jidocode.shared import subjects
from jidocode.shared.bus import Bus, gather
from jidocode.shared.clients import EngineClient
from jidocode.shared.config import Config
from jidocode.shared.endpoints import endpoint
from jidocode.shared.envelope import Envelope, decode, encode, encode_binary
from jidocode.shared.errors import InvalidInput, JidoError, NotFound, RequestTimeout
from jidocode.shared.events.engine import (
    GetProject,
    ListProjects,
    ProjectInfo,
    ProjectList,
    StartProject,
)
from jidocode.shared.service import Handler, ServiceHost, scoped_project_id


@pytest.fixture
async def host_bus(config: Config) -> AsyncIterator[Bus]:
    b = await Bus.connect(config, "engine")
    yield b
    await b.close()


def _info(project_id: str, root_path: str = "/r") -> ProjectInfo:
    return ProjectInfo(project_id=project_id, root_path=root_path, started_at="2026-01-01T00:00:00Z")


async def _raw_request(bus: Bus, subject: str, payload: bytes, headers: dict[str, str] | None = None) -> Msg:
    """A plain nats request to a just-started endpoint, asking again on the server's rare transient
    "no responders" (see ``Bus._ask_again``); a real absence still fails after a few tries."""
    for _ in range(3):
        try:
            return await bus.nc.request(subject, payload, headers=headers, timeout=5)
        except nats.errors.NoRespondersError:
            await asyncio.sleep(0.05)  # bounded retries of a transient status, not a synchronisation
    return await bus.nc.request(subject, payload, headers=headers, timeout=5)


async def _host(bus: Bus, *endpoints: tuple[type[Any], str, Handler[Any]], **options: Any) -> ServiceHost:
    host = ServiceHost(bus, name="engine", **options)
    for command, subject, handler in endpoints:
        host.endpoint(command, subject, handler)
    await host.start()
    return host


async def test_an_endpoint_answers_call_with_the_declared_reply_model(bus: Bus, host_bus: Bus) -> None:
    async def start(cmd: StartProject, env: Envelope) -> ProjectInfo:
        return _info(env.correlation_id or "", cmd.root_path)

    await _host(host_bus, (StartProject, "t.ok", start))
    reply = await bus.call("t.ok", StartProject(root_path="/r"), correlation_id="K1")
    assert reply == _info("K1", "/r")
    # on the wire: the reply envelope keeps the request's correlation id and names it as its cause
    request = bus.envelope(StartProject(root_path="/r"), correlation_id="K2")
    env = decode((msg := await _raw_request(bus, "t.ok", encode(request)[0])).data, msg.headers)
    assert env.type == "project.info" and env.data == _info("K2").to_data()
    assert env.correlation_id == "K2" and env.causation_id == request.id


async def test_serve_registers_the_table_endpoint_and_the_typed_client_reaches_it(
    bus: Bus, host_bus: Bus
) -> None:
    async def listed(cmd: ListProjects, env: Envelope) -> ProjectList:
        return ProjectList(projects=[_info("P1")])

    host = ServiceHost(host_bus, name="engine")
    host.serve(endpoint("engine", "list_projects"), listed)
    await host.start()
    reply = await EngineClient(bus).list_projects()
    assert isinstance(reply, ProjectList) and [p.project_id for p in reply.projects] == ["P1"]


async def test_serve_refuses_an_endpoint_of_another_service(host_bus: Bus) -> None:
    async def info(cmd: GetProject, env: Envelope) -> ProjectInfo:
        return _info("P")

    host = ServiceHost(host_bus, name="engine")
    with pytest.raises(ValueError, match=r"project\.info belongs to another service"):
        host.serve(endpoint("project", "info"), info)


async def test_endpoints_are_added_before_start(host_bus: Bus) -> None:
    async def listed(cmd: ListProjects, env: Envelope) -> ProjectList:
        return ProjectList()

    host = await _host(host_bus)
    try:
        with pytest.raises(RuntimeError, match="before start"):
            host.endpoint(ListProjects, "t.late", listed)
    finally:
        await host.stop()


async def test_a_handler_error_becomes_its_typed_error(bus: Bus, host_bus: Bus) -> None:
    async def missing(cmd: ListProjects, env: Envelope) -> ProjectList:
        raise NotFound("unknown project id 'X'", details={"project_id": "X"})

    await _host(host_bus, (ListProjects, "t.missing", missing))
    with pytest.raises(NotFound, match="unknown project id") as info:
        await bus.call("t.missing", ListProjects())
    assert info.value.details == {"project_id": "X"}


async def test_a_handler_answering_the_wrong_model_is_an_internal_error_not_a_timeout(
    bus: Bus, host_bus: Bus
) -> None:
    async def wrong(cmd: StartProject, env: Envelope) -> ProjectInfo:
        return ProjectList()  # type: ignore[return-value]  # the contract says ProjectInfo

    await _host(host_bus, (StartProject, "t.wrong", wrong))
    with pytest.raises(
        JidoError, match="handler answered ProjectList, the contract says ProjectInfo"
    ) as info:
        await bus.call("t.wrong", StartProject(root_path="/r"), timeout=5)
    assert info.value.type == "internal" and not isinstance(info.value, RequestTimeout)


async def test_a_request_of_another_type_is_invalid_input_naming_both(bus: Bus, host_bus: Bus) -> None:
    called = False

    async def start(cmd: StartProject, env: Envelope) -> ProjectInfo:
        nonlocal called
        called = True
        return _info("P")

    await _host(host_bus, (StartProject, "t.typed", start))
    with pytest.raises(
        InvalidInput, match=r"expected a 'engine\.start_project' request, got 'engine\.list_projects'"
    ) as info:
        await bus.call("t.typed", ListProjects())
    assert info.value.details == {
        "expected": "engine.start_project",
        "type": "engine.list_projects",
        "endpoint": "engine.typed",
        "served_on": ["jido.engine.list_projects"],
    }
    assert not called


async def test_an_unexpected_exception_becomes_an_internal_error_reply(bus: Bus, host_bus: Bus) -> None:
    async def boom(cmd: ListProjects, env: Envelope) -> ProjectList:
        raise RuntimeError("kaput")

    await _host(host_bus, (ListProjects, "t.boom", boom))
    msg = await _raw_request(bus, "t.boom", encode(bus.envelope(ListProjects()))[0])
    assert msg.headers is not None and msg.headers["Nats-Service-Error-Code"] == "500"
    with pytest.raises(JidoError, match="internal error in boom: RuntimeError: kaput") as info:
        await bus.call("t.boom", ListProjects())
    assert info.value.type == "internal"


async def test_a_slow_handler_times_out_as_request_timeout(bus: Bus, host_bus: Bus) -> None:
    release = asyncio.Event()

    async def slow(cmd: ListProjects, env: Envelope) -> ProjectList:
        await release.wait()
        return ProjectList()

    await _host(host_bus, (ListProjects, "t.slow", slow))
    try:
        with pytest.raises(RequestTimeout, match=r"within 0\.2 s"):
            await bus.call("t.slow", ListProjects(), timeout=0.2)
    finally:
        release.set()


async def test_a_binary_mode_request_is_accepted(bus: Bus, host_bus: Bus) -> None:
    async def echo(cmd: ListProjects, env: Envelope) -> ProjectList:
        return ProjectList(projects=[_info(env.project_id or "")])

    await _host(host_bus, (ListProjects, "t.echo", echo))
    env = Envelope.new(ListProjects(), source="other/1", project_id="P9")
    body, headers = encode_binary(env)
    msg = await _raw_request(bus, "t.echo", body, headers)
    reply = decode(msg.data, msg.headers)
    assert reply.type == "engine.project_list" and reply.data["projects"][0]["project_id"] == "P9"
    assert reply.project_id == "P9"


async def test_scoped_project_id_refuses_a_spoofed_extension(bus: Bus, host_bus: Bus) -> None:
    async def which(cmd: GetProject, env: Envelope) -> ProjectInfo:
        return _info(scoped_project_id(env))

    await _host(host_bus, (GetProject, subjects.project_pattern("which"), which))
    assert (await bus.call(subjects.project("PA", "which"), GetProject())).project_id == "PA"
    with pytest.raises(InvalidInput, match="does not match the subject"):
        await bus.call(subjects.project("PA", "which"), GetProject(), project_id="PB")


async def test_srv_info_lists_endpoints_with_request_and_reply_types(bus: Bus, host_bus: Bus) -> None:
    async def start(cmd: StartProject, env: Envelope) -> ProjectInfo:
        return _info("P")

    host = ServiceHost(host_bus, name="engine")
    host.serve(endpoint("engine", "start_project"), start)
    host.endpoint(StartProject, "t.plain", start)
    await host.start()
    for _ in range(3):
        await bus.call("t.plain", StartProject(root_path="/r"))

    [ping] = [json.loads(m.data) for m in await gather(bus.nc, subjects.srv("PING", "engine"))]
    assert ping["name"] == "jidocode-engine" and ping["metadata"]["instance"] == host_bus.source
    [info] = [json.loads(m.data) for m in await gather(bus.nc, subjects.srv("INFO", "engine"))]
    assert [(e["name"], e["subject"], e["queue_group"], e["metadata"]) for e in info["endpoints"]] == [
        (
            "start_project",
            "jido.engine.start_project",
            "jidocode-engine",
            {"request_type": "engine.start_project", "reply_type": "project.info"},
        ),
        (
            "plain",
            "t.plain",
            "jidocode-engine",
            {"request_type": "engine.start_project", "reply_type": "project.info"},
        ),
    ]
    [stats] = [json.loads(m.data) for m in await gather(bus.nc, subjects.srv("STATS", "engine"))]
    assert [e["num_requests"] for e in stats["endpoints"]] == [0, 3]


async def test_close_drains_an_in_flight_request(bus: Bus, config: Config) -> None:
    service_bus = await Bus.connect(config, "engine")
    started = asyncio.Event()
    release = asyncio.Event()

    async def slow(cmd: ListProjects, env: Envelope) -> ProjectList:
        started.set()
        await release.wait()
        return ProjectList(projects=[_info("done")])

    await _host(service_bus, (ListProjects, "t.drain", slow))
    pending = asyncio.create_task(bus.call("t.drain", ListProjects(), timeout=5))
    await asyncio.wait_for(started.wait(), 5)
    closing = asyncio.create_task(service_bus.close())
    release.set()
    assert (await pending).projects[0].project_id == "done"
    await asyncio.wait_for(closing, 10)
    assert service_bus.nc.is_closed


async def test_requests_are_served_concurrently_and_bounded(bus: Bus, config: Config) -> None:
    service_bus = await Bus.connect(config, "engine")
    release = asyncio.Event()
    entered = 0

    async def slow(cmd: ListProjects, env: Envelope) -> ProjectList:
        nonlocal entered
        entered += 1
        await release.wait()
        return ProjectList(projects=[_info("slow")])

    async def fast(cmd: ListProjects, env: Envelope) -> ProjectList:
        return ProjectList(projects=[_info("fast")])

    host = await _host(
        service_bus, (ListProjects, "t.c.slow", slow), (ListProjects, "t.c.fast", fast), max_concurrent=2
    )

    async def call(subject: str, timeout: float) -> str:
        return (await bus.call(subject, ListProjects(), timeout=timeout)).projects[0].project_id

    try:
        first = asyncio.create_task(call("t.c.slow", 10))
        # a slow request does not hold up another one
        assert await call("t.c.fast", 5) == "fast"
        second = asyncio.create_task(call("t.c.slow", 10))
        # the bound: with two slow requests in flight, a third waits for a slot
        third = asyncio.create_task(call("t.c.fast", 10))
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
    with pytest.raises(ValueError, match="drain_timeout"):
        ServiceHost(_NoBus(), name="engine", drain_timeout=-1)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="unknown service"):
        ServiceHost(_NoBus(), name="nope")  # type: ignore[arg-type]
