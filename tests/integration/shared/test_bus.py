"""The bus client over a real nats-server: call, emit, JetStream, KV, subscriptions.

The service host side (typed endpoints, middleware, ``$SRV.INFO``) is in
``test_service.py``; here the responders are mostly plain nats subscriptions,
so what is tested is the bus's own behaviour on the wire.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable

import pytest
from nats.aio.msg import Msg

from jidocode.shared import subjects
from jidocode.shared.bus import Bus, subject_of
from jidocode.shared.config import Config
from jidocode.shared.endpoints import endpoint
from jidocode.shared.envelope import Envelope, decode, encode, error_envelope
from jidocode.shared.errors import InvalidEnvelope, NotFound, RequestTimeout, ServiceUnavailable
from jidocode.shared.events import EventModel
from jidocode.shared.events.conversation import UserMessage
from jidocode.shared.events.engine import (
    ListProjects,
    ProjectInfo,
    ProjectList,
    ProjectStarted,
    StartProject,
    WhereisProject,
)


async def _responder(bus: Bus, subject: str, answer: Callable[[Envelope], Awaitable[bytes]]) -> None:
    """A plain nats responder on ``subject`` (no service host): ``answer`` gives the reply bytes."""

    async def _cb(msg: Msg) -> None:
        await msg.respond(await answer(decode(msg.data, msg.headers)))

    await bus.nc.subscribe(subject, cb=_cb)
    await bus.nc.flush()


def _reply_bytes(event: EventModel, request: Envelope) -> bytes:
    return encode(Envelope.new(event, source="t/1", causation_id=request.id))[0]


async def test_call_returns_the_declared_reply_model(bus: Bus, config: Config) -> None:
    other = await Bus.connect(config, "responder")
    try:

        async def info(env: Envelope) -> bytes:
            cmd = env.event()
            assert isinstance(cmd, StartProject)
            return _reply_bytes(ProjectInfo(project_id="P1", root_path=cmd.root_path, started_at="t"), env)

        await _responder(other, "t.call", info)
        reply = await bus.call("t.call", StartProject(root_path="/r"))
        assert reply == ProjectInfo(project_id="P1", root_path="/r", started_at="t")
    finally:
        await other.close()


async def test_call_raises_the_typed_error_of_an_error_reply(bus: Bus, config: Config) -> None:
    other = await Bus.connect(config, "responder")
    try:

        async def missing(env: Envelope) -> bytes:
            err = NotFound("unknown project id 'X'", details={"project_id": "X"})
            return encode(error_envelope("t/1", err, causation_id=env.id))[0]

        await _responder(other, "t.missing", missing)
        with pytest.raises(NotFound, match="unknown project id") as info:
            await bus.call("t.missing", ListProjects())
        assert info.value.details == {"project_id": "X"}
    finally:
        await other.close()


async def test_call_refuses_a_reply_of_another_type(bus: Bus, config: Config) -> None:
    other = await Bus.connect(config, "responder")
    try:

        async def wrong(env: Envelope) -> bytes:
            return _reply_bytes(ProjectList(), env)  # a StartProject must be answered with a ProjectInfo

        await _responder(other, "t.wrong", wrong)
        with pytest.raises(InvalidEnvelope, match=r"'engine\.project_list'.*'project\.info'") as info:
            await bus.call("t.wrong", StartProject(root_path="/r"))
        assert info.value.details == {
            "subject": "t.wrong",
            "type": "engine.project_list",
            "expected": "project.info",
        }
    finally:
        await other.close()


async def test_no_responder_is_a_clear_error_not_a_timeout(bus: Bus) -> None:
    with pytest.raises(ServiceUnavailable, match="jidocode up"):
        await bus.call(endpoint("engine", "list_projects").subject(), ListProjects(), timeout=5)


async def test_a_silent_responder_times_out_as_request_timeout(bus: Bus) -> None:
    heard = asyncio.Event()

    async def _cb(msg: Msg) -> None:
        heard.set()  # and never answers

    await bus.nc.subscribe("t.slow", cb=_cb)
    with pytest.raises(RequestTimeout, match=r"within 0\.2 s"):
        await bus.call("t.slow", ListProjects(), timeout=0.2)
    assert heard.is_set()


async def test_call_puts_the_extensions_on_the_request(bus: Bus, config: Config) -> None:
    other = await Bus.connect(config, "responder")
    try:
        seen: list[Envelope] = []

        async def listed(env: Envelope) -> bytes:
            seen.append(env)
            return _reply_bytes(ProjectList(), env)

        await _responder(other, "t.ext", listed)
        reply = await bus.call("t.ext", ListProjects(), correlation_id="K2", project_id="P1")
        assert reply == ProjectList()
        [request] = seen
        assert request.correlation_id == "K2" and request.project_id == "P1"
        assert request.source == bus.source and request.type == ListProjects.TYPE
    finally:
        await other.close()


async def test_emit_publishes_a_signal_on_its_type_subject(bus: Bus) -> None:
    sub = await bus.nc.subscribe(subjects.signal_filter())
    env = await bus.emit(ProjectStarted(project_id="P", root_path="/r"), project_id="P")
    msg = await sub.next_msg(timeout=10)
    assert msg.subject == "jido.sig.project.started"
    assert subject_of(ProjectStarted(project_id="P", root_path="/r")) == msg.subject
    got = decode(msg.data, msg.headers)
    assert got.id == env.id and got.project_id == "P"
    assert got.event() == ProjectStarted(project_id="P", root_path="/r")


async def test_emit_publishes_a_conversation_event_on_its_conversation_subject(bus: Bus) -> None:
    sub = await bus.nc.subscribe(subjects.conversation_out_filter("P1"))
    await bus.emit(UserMessage(text="hi"), project_id="P1", conversation_id="C1")
    msg = await sub.next_msg(timeout=10)
    assert msg.subject == "jido.evt.P1.C1.conversation.user.message"
    got = decode(msg.data, msg.headers)
    assert got.conversation_id == "C1" and got.event() == UserMessage(text="hi")


async def test_emit_refuses_commands_and_conversation_events_without_ids(bus: Bus) -> None:
    sub = await bus.nc.subscribe("jido.>")
    with pytest.raises(ValueError, match="travels as a request or reply"):
        await bus.emit(StartProject(root_path="/r"))
    with pytest.raises(ValueError, match="travels as a request or reply"):
        await bus.emit(ProjectList())
    with pytest.raises(ValueError, match="needs a project and conversation id"):
        await bus.emit(UserMessage(text="hi"), project_id="P1")
    with pytest.raises(ValueError, match="needs a project and conversation id"):
        await bus.emit(UserMessage(text="hi"))
    # nothing left the client: the next message seen is this marker
    await bus.nc.publish("jido.t.marker", b"")
    assert (await sub.next_msg(timeout=10)).subject == "jido.t.marker"


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
    reply = await bus.nc.request("t.sub", b'{"id":"1"}', timeout=10)
    assert json.loads(reply.data)["data"]["type"] == "invalid_envelope"
    await bus.publish("t.sub", WhereisProject(project_id="P"), project_id="P")
    env = await asyncio.wait_for(got.get(), 10)
    assert env.nats_subject == "t.sub" and env.event() == WhereisProject(project_id="P")


async def test_connect_to_nothing_says_how_to_start() -> None:
    from jidocode.shared.natsserver import free_port

    with pytest.raises(ServiceUnavailable, match="jidocode up"):
        await Bus.connect(Config(nats_url=f"nats://127.0.0.1:{free_port()}"), "x", wait=False)


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
