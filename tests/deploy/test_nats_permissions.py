"""The generated NATS config, loaded by a real nats-server, refuses what a service has no business doing
and allows what it needs. Every refusal is the server's own permission error, collected from the client's
error callback; every wait has a timeout."""

from __future__ import annotations

import asyncio
import contextlib

import nats
import nats.errors
import nats.js.errors
import pytest
from nats.js.api import KeyValueConfig, StreamConfig
from nats.micro import add_service
from nats.micro.request import Request
from nats.micro.service import EndpointConfig, ServiceConfig

from jidocode.shared import nats_permissions as perms
from jidocode.shared import subjects
from jidocode.shared.bus import Bus
from jidocode.shared.clients import ConversationsClient
from jidocode.shared.config import Config
from jidocode.shared.endpoints import endpoint
from jidocode.shared.envelope import Envelope
from jidocode.shared.events.conversation import ConversationInfo, StartConversation
from jidocode.shared.kv_keys import kv_keys
from jidocode.shared.service import ServiceHost, scoped_project_id

from .conftest import SecuredNats
from .natsutil import connect_as, first_request, until_live

P, C = "proj1", "conv1"


async def test_unauthenticated_client_is_refused(secured_nats: SecuredNats) -> None:
    errors: list[Exception] = []

    async def _cb(exc: Exception) -> None:
        errors.append(exc)

    with pytest.raises(nats.errors.Error, match="Authorization Violation"):
        await nats.connect(secured_nats.url, allow_reconnect=False, error_cb=_cb, connect_timeout=5)


async def test_wrong_password_is_refused(secured_nats: SecuredNats) -> None:
    async def _cb(exc: Exception) -> None:
        return None

    with pytest.raises(nats.errors.Error, match="Authorization Violation"):
        await nats.connect(
            secured_nats.url,
            user="tool_runner",
            password=secured_nats.passwords["engine"],
            allow_reconnect=False,
            error_cb=_cb,
            connect_timeout=5,
        )


async def test_tool_runner_cannot_publish_conversation_input(secured_nats: SecuredNats) -> None:
    url, pw = secured_nats.url, secured_nats.passwords
    async with connect_as(url, "client", pw) as client, connect_as(url, "tool_runner", pw) as runner:
        seen = await client.nc.subscribe(subjects.conversation_in_filter())
        await client.nc.flush()
        await runner.nc.publish(subjects.conversation_in(P, C), b"forged")
        error = await runner.next_error()
        assert "permissions violation for publish" in error
        assert subjects.conversation_in(P, C).lower() in error
        # The forged message never reached a subscriber: the first one seen is the client's own.
        await client.nc.publish(subjects.conversation_in(P, C), b"genuine")
        msg = await seen.next_msg(timeout=15)
        assert msg.data == b"genuine"
        await client.assert_no_errors()


async def test_tool_runner_cannot_delete_or_purge_a_stream(secured_nats: SecuredNats) -> None:
    url, pw = secured_nats.url, secured_nats.passwords
    async with connect_as(url, "conversation", pw) as conv, connect_as(url, "tool_runner", pw) as runner:
        js = conv.nc.jetstream()
        await js.add_stream(StreamConfig(name=subjects.STREAM_JOURNAL, subjects=[subjects.journal_filter()]))
        await js.publish(subjects.journal(P, C), b"entry-1")

        for attempt in (
            runner.nc.jetstream().delete_stream(subjects.STREAM_JOURNAL),
            runner.nc.jetstream().purge_stream(subjects.STREAM_JOURNAL),
        ):
            pending = asyncio.ensure_future(attempt)
            error = await runner.next_error()
            assert "permissions violation for publish" in error
            assert "$js.api.stream." in error
            pending.cancel()
            with contextlib.suppress(asyncio.CancelledError, nats.errors.TimeoutError):
                await pending

        info = await js.stream_info(subjects.STREAM_JOURNAL)
        assert info.state.messages == 1
        await conv.assert_no_errors()


@pytest.mark.parametrize(
    ("user", "foreign_inbox"),
    [
        ("conversation", perms.inbox_prefix("tool_runner")),
        ("tool_runner", perms.inbox_prefix("client")),
        ("asset_loader", perms.inbox_prefix("engine")),
        ("project", "_INBOX"),  # nats-py's default prefix is nobody's
    ],
)
async def test_service_cannot_subscribe_to_another_inbox(
    secured_nats: SecuredNats, user: str, foreign_inbox: str
) -> None:
    async with connect_as(secured_nats.url, user, secured_nats.passwords) as conn:
        await conn.nc.subscribe(f"{foreign_inbox}.>")
        error = await conn.next_error()
        assert "permissions violation for subscription" in error
        assert foreign_inbox.lower() in error


async def test_service_cannot_publish_into_an_inbox_unprompted(secured_nats: SecuredNats) -> None:
    async with connect_as(secured_nats.url, "engine", secured_nats.passwords) as engine:
        await engine.nc.publish(f"{perms.inbox_prefix('client')}.abc", b"spoofed reply")
        assert "permissions violation for publish" in await engine.next_error()


#: One real endpoint of each service, from the endpoint table.
_ENDPOINTS = {
    "engine": endpoint("engine", "list_projects").subject(),
    "project": endpoint("project", "info").subject(P),
    "conversation": endpoint("conversation", "start").subject(P),
    "tool_runner": endpoint("tool_runner", "run").subject(P),
    "asset_loader": endpoint("asset_loader", "list").subject(P),
    "prd": endpoint("prd", "list").subject(P),
}


@pytest.mark.parametrize("service", perms.SERVICES)
async def test_service_serves_endpoints_answers_ping_and_publishes_signals(
    secured_nats: SecuredNats, service: str
) -> None:
    url, pw = secured_nats.url, secured_nats.passwords
    async with connect_as(url, service, pw) as svc, connect_as(url, "client", pw) as client:

        async def handler(req: Request) -> None:
            await req.respond(b"served:" + req.data)

        micro = await add_service(
            svc.nc, ServiceConfig(name=subjects.SERVICE_NAMES[service], version="0.1.0", description="test")
        )
        await micro.add_endpoint(
            EndpointConfig(name="ep", subject=_ENDPOINTS[service], handler=handler, queue_group=service)
        )
        await svc.nc.flush()  # the endpoint's subscription is registered before the client asks
        try:
            reply = await first_request(client.nc, _ENDPOINTS[service], b"x")
            assert reply.data == b"served:x"
            # The health probe runs with the service's own credentials.
            pong = await svc.nc.request(subjects.srv("PING", service), b"", timeout=5)
            assert subjects.SERVICE_NAMES[service].encode() in pong.data
            # Signals reach observers.
            signals = await client.nc.subscribe(subjects.signal_filter())
            await client.nc.flush()
            await until_live(svc.nc, signals, subjects.signal(f"{service}.started"))
            await svc.nc.publish(subjects.signal(f"{service}.started"), b"up")
            assert (await signals.next_msg(timeout=15)).data == b"up"
            await svc.assert_no_errors()
            await client.assert_no_errors()
        finally:
            await micro.stop()


async def test_kv_owners_write_and_readers_read(secured_nats: SecuredNats) -> None:
    url, pw = secured_nats.url, secured_nats.passwords
    async with connect_as(url, "engine", pw) as engine, connect_as(url, "tool_runner", pw) as runner:
        projects = await engine.nc.jetstream().create_key_value(
            KeyValueConfig(bucket=subjects.BUCKET_PROJECTS, history=1)
        )
        await projects.put(P, b"/srv/projects/p1")
        for reader in ("project", "conversation", "tool_runner", "asset_loader", "client"):
            async with connect_as(url, reader, pw) as conn:
                kv = await conn.nc.jetstream().key_value(subjects.BUCKET_PROJECTS)
                assert (await kv.get(P)).value == b"/srv/projects/p1"
                assert await kv_keys(kv) == [P]
                await conn.assert_no_errors()

        # A reader cannot write the registry.
        runner_projects = await runner.nc.jetstream().key_value(subjects.BUCKET_PROJECTS)
        pending = asyncio.ensure_future(runner_projects.put(P, b"/etc"))
        assert "permissions violation for publish" in await runner.next_error()
        pending.cancel()
        with contextlib.suppress(asyncio.CancelledError, nats.errors.TimeoutError):
            await pending
        assert (await projects.get(P)).value == b"/srv/projects/p1"

        # The tool runner owns its own bucket.
        calls = await runner.nc.jetstream().create_key_value(
            KeyValueConfig(bucket=subjects.BUCKET_TOOL_CALLS)
        )
        await calls.put("call-1", b"running")
        assert (await calls.get("call-1")).value == b"running"
        await runner.assert_no_errors()
        await engine.assert_no_errors()


async def test_conversation_flow_between_client_conversation_and_tool_runner(
    secured_nats: SecuredNats,
) -> None:
    url, pw = secured_nats.url, secured_nats.passwords
    async with (
        connect_as(url, "conversation", pw) as conv,
        connect_as(url, "client", pw) as client,
        connect_as(url, "tool_runner", pw) as runner,
    ):
        cjs = conv.nc.jetstream()
        await cjs.add_stream(
            StreamConfig(name=subjects.STREAM_CONV_IN, subjects=[subjects.conversation_in_filter()])
        )
        await cjs.add_stream(StreamConfig(name=subjects.STREAM_JOURNAL, subjects=[subjects.journal_filter()]))
        await cjs.add_stream(
            StreamConfig(name=subjects.STREAM_EVENTS, subjects=[subjects.conversation_out_filter()])
        )
        for bucket in (subjects.BUCKET_CONVERSATIONS, subjects.BUCKET_OWNERS):
            kv = await cjs.create_key_value(KeyValueConfig(bucket=bucket))
            await kv.put(C, b"conv-state")

        # The tool runner listens for approval answers on conversation input.
        answers = await runner.nc.subscribe(subjects.conversation_in_filter(P))
        await runner.nc.flush()
        # (probes go to another conversation: the stream keeps them, the consumer below never sees them)
        await until_live(client.nc, answers, subjects.conversation_in(P, "probe"))

        # The client sends input through JetStream (the ack comes back to its private inbox).
        ack = await client.nc.jetstream(timeout=15).publish(subjects.conversation_in(P, C), b"hello")
        assert ack.stream == subjects.STREAM_CONV_IN
        assert (await answers.next_msg(timeout=15)).data == b"hello"

        # The conversation service consumes its input durably and journals it.
        consumer = await cjs.pull_subscribe(
            subjects.conversation_in_filter(P, C), durable="conv", stream=subjects.STREAM_CONV_IN
        )
        [msg] = await consumer.fetch(1, timeout=5)
        assert msg.data == b"hello"
        await msg.ack()
        await cjs.publish(subjects.journal(P, C), b"journal-1")

        # The tool runner may emit exactly the approval request among conversation outputs.
        outputs = await client.nc.subscribe(subjects.conversation_out_filter(P, C))
        await client.nc.flush()
        asked = subjects.conversation_out(P, C, "conversation.approval.requested")
        await until_live(runner.nc, outputs, asked)
        await runner.nc.publish(asked, b"ask")
        assert (await outputs.next_msg(timeout=15)).data == b"ask"
        await runner.nc.publish(subjects.conversation_out(P, C, "conversation.assistant.message"), b"forged")
        assert "permissions violation for publish" in await runner.next_error()

        # The client reads the journal back (get_history).
        history = await client.nc.jetstream().pull_subscribe(
            subjects.journal_filter(P, C), durable=None, stream=subjects.STREAM_JOURNAL
        )
        [entry] = await history.fetch(1, timeout=5)
        assert entry.data == b"journal-1"
        await entry.ack()

        await conv.assert_no_errors()
        await client.assert_no_errors()


async def test_asset_loader_runs_tools_and_emits_hooks(secured_nats: SecuredNats) -> None:
    url, pw = secured_nats.url, secured_nats.passwords
    async with (
        connect_as(url, "asset_loader", pw) as loader,
        connect_as(url, "tool_runner", pw) as runner,
        connect_as(url, "client", pw) as client,
    ):
        runs = await runner.nc.subscribe(subjects.tools_pattern("run"), queue="tool_runner")

        async def serve_one() -> None:
            msg = await runs.next_msg(timeout=15)
            await msg.respond(b"ran")

        served = asyncio.ensure_future(serve_one())
        await runner.nc.flush()
        hooks = await client.nc.subscribe(subjects.hook_filter())
        await client.nc.flush()
        await until_live(loader.nc, hooks, subjects.hook("skill/pre"))
        reply = await loader.nc.request(subjects.tools(P, "run"), b"cmd", timeout=5)
        assert reply.data == b"ran"
        await served
        await loader.nc.publish(subjects.hook("skill/pre"), b"pre")
        assert (await hooks.next_msg(timeout=15)).data == b"pre"
        # …but it may not drive a conversation.
        await loader.nc.publish(subjects.conversation_in(P, C), b"forged")
        assert "permissions violation for publish" in await loader.next_error()
        await runner.assert_no_errors()


async def test_bus_library_works_under_the_generated_users(
    secured_nats: SecuredNats, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The services' own Bus (credentials and inbox prefix from the environment) creates streams and KV."""

    def config_for(user: str) -> Config:
        return _config_for(secured_nats, user, monkeypatch)

    conv = await Bus.connect(config_for("conversation"), "conversation")
    try:
        await conv.ensure_stream(subjects.STREAM_JOURNAL, [subjects.journal_filter()])
        await conv.ensure_stream(subjects.STREAM_JOURNAL, [subjects.journal_filter()], max_age=3600.0)
        kv = await conv.kv(subjects.BUCKET_OWNERS)
        await kv.put(C, b"inst-1")
    finally:
        await conv.close()

    runner = await Bus.connect(config_for("tool_runner"), "tool_runner")
    try:
        # A reader binding a bucket that does not exist yet may create it, idempotently.
        projects = await runner.kv(subjects.BUCKET_PROJECTS)
        with pytest.raises(nats.js.errors.NoKeysError):
            await projects.keys()
        calls = await runner.kv(subjects.BUCKET_TOOL_CALLS)
        await calls.put("call-1", b"done")
        assert (await calls.get("call-1")).value == b"done"
    finally:
        await runner.close()


def _config_for(secured_nats: SecuredNats, user: str, monkeypatch: pytest.MonkeyPatch) -> Config:
    """A config connecting as ``user``; its inbox prefix is read from the environment at connect time."""
    monkeypatch.setenv(perms.INBOX_ENV_VAR, perms.inbox_prefix(user))
    return Config(
        nats_url=secured_nats.url,
        nats_user=user,
        nats_password=secured_nats.passwords[user],
        instance="t",
    )


async def test_clients_reach_the_conversation_service_directly_and_no_service_forwards(
    secured_nats: SecuredNats, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The typed client, as the client user, calls ``jido.conversations.<p>.start`` on a host running
    as the conversation user; the project service's user may no longer request it."""
    conv = await Bus.connect(_config_for(secured_nats, "conversation", monkeypatch), "conversation")
    client = await Bus.connect(_config_for(secured_nats, "client", monkeypatch), "client")
    host = ServiceHost(conv, name="conversation")

    async def start(cmd: StartConversation, env: Envelope) -> ConversationInfo:
        return ConversationInfo(
            project_id=scoped_project_id(env), conversation_id=cmd.conversation_id or "new"
        )

    host.serve(endpoint("conversation", "start"), start)
    await host.start()
    try:
        info = await ConversationsClient(client, P).start(C)
        assert (info.project_id, info.conversation_id) == (P, C)
        async with connect_as(secured_nats.url, "project", secured_nats.passwords) as project:
            await project.nc.publish(endpoint("conversation", "start").subject(P), b"forwarded")
            error = await project.next_error()
            assert "permissions violation for publish" in error
            assert endpoint("conversation", "start").subject(P).lower() in error
    finally:
        await host.stop()
        await client.close()
        await conv.close()
