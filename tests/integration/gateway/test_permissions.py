"""The gateway's SSE paths under its own NATS user (decision 0221), on a server that runs the
JidoCode users as ``jidocode up`` does: it reads the conversations' output through its pull
consumers and observes the bus, and cannot write conversation input."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from jidocode.services.gateway.streams import Puller, _consumer_config
from jidocode.shared import nats_permissions as perms
from jidocode.shared import subjects
from jidocode.shared.bus import Bus
from jidocode.shared.config import Config
from jidocode.shared.envelope import new_id
from jidocode.shared.events.conversation import ReplayInfo
from jidocode.shared.natsserver import NatsServer

pytestmark = pytest.mark.slow


def _event(type_: str) -> bytes:
    return json.dumps(
        {"specversion": "1.0", "id": new_id(), "source": "test", "type": type_, "data": {}}
    ).encode()


async def test_the_gateway_user_follows_output_and_the_bus_but_cannot_write_input(tmp_path: Path) -> None:
    passwords = {user: perms.generate_password() for user in perms.USERS}
    server = await asyncio.to_thread(
        NatsServer(store_dir=tmp_path / "js", sync="default", users=passwords).start
    )

    def as_user(user: str) -> Config:
        return Config(nats_url=server.url, nats_user=user, nats_password=passwords[user], jido_home=tmp_path)

    conversation = await Bus.connect(as_user("conversation"), "conversation")
    gateway = await Bus.connect(as_user(perms.GATEWAY), "gateway")
    try:
        await conversation.ensure_stream(subjects.STREAM_EVENTS, [subjects.conversation_out_filter()])
        out = subjects.conversation_out("p1", "c1", "conversation.started")
        await conversation.js.publish(out, _event("conversation.started"))

        # a conversation's stream: the pull consumer, created, read and deleted as the gateway user
        info = ReplayInfo(
            project_id="p1",
            conversation_id="c1",
            subject=subjects.conversation_out_filter("p1", "c1"),
            stream=subjects.STREAM_EVENTS,
            start_sequence=1,
        )
        config = _consumer_config(info)
        config.filter_subject = info.subject
        consumer = await gateway.js.add_consumer(info.stream, config=config)
        puller = Puller(gateway, info.stream, consumer.name or "")
        await puller.start()
        msg = await asyncio.wait_for(puller.next(), 30)
        assert msg is not None and json.loads(msg.data)["type"] == "conversation.started"
        await puller.close()
        assert not [c for c in await conversation.js.consumers_info(info.stream) if c.name == consumer.name]

        # the bus: it observes jido.>, and its own write to conversation input never arrives
        seen: list[str] = []
        arrived = asyncio.Event()

        async def on_msg(m: object) -> None:
            seen.append(getattr(m, "subject", ""))
            if getattr(m, "subject", "").startswith(subjects.signal_filter()[:-1]):
                arrived.set()

        await gateway.nc.subscribe(subjects.all_subjects(), cb=on_msg)
        await conversation.nc.subscribe(subjects.conversation_in_filter(), cb=on_msg)
        await gateway.nc.flush()
        await conversation.nc.flush()
        await gateway.nc.publish(subjects.conversation_in("p1", "c1"), _event("conversation.user.message"))
        await gateway.nc.flush()  # the server has handled it before the sentinel is sent
        await conversation.nc.publish(subjects.signal("test.sentinel"), _event("test.sentinel"))
        await asyncio.wait_for(arrived.wait(), 30)  # published after the forbidden one, and seen
        await gateway.nc.flush()
        assert subjects.conversation_in("p1", "c1") not in seen
    finally:
        await gateway.close()
        await conversation.close()
        await asyncio.to_thread(server.stop)
