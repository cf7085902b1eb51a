"""An event the conversation service never answered (it died with the request, or is starting
again) is sent again with the same id, so a crash costs a turn a wait, never the turn (issue 31,
point 4). A real nats-server; the service's side is a subscription that stays silent at first."""

from __future__ import annotations

import pytest
from nats.aio.msg import Msg

from jidocode.client import JidoClient
from jidocode.client import _send as client_module
from jidocode.shared import subjects
from jidocode.shared.bus import Bus
from jidocode.shared.envelope import decode, encode_event
from jidocode.shared.errors import RequestTimeout
from jidocode.shared.events.conversation import EventAccepted, UserMessage
from jidocode.shared.events.engine import ProjectInfo

P, C = "psendagain", "csendagain"


def _client(bus: Bus) -> JidoClient:
    project = ProjectInfo(project_id=P, root_path="/nowhere", started_at="2026-01-01T00:00:00Z")
    client = JidoClient(bus, project, owns_bus=False, settings={})
    client.conversation_id = C
    return client


async def _service(bus: Bus, silent_for: int, seen: list[str]) -> None:
    """Answers ``send_event`` as the service does, after staying silent ``silent_for`` times."""

    async def answer(msg: Msg) -> None:
        env = decode(msg.data, msg.headers)
        seen.append(str(env.data["id"]))
        if len(seen) <= silent_for:
            return
        accepted = EventAccepted(id=env.data["id"], correlation_id=env.data["correlation_id"], sequence=7)
        await msg.respond(encode_event(accepted, source="fake-conversation")[1])

    await bus.nc.subscribe(subjects.conversations(P, "send_event"), cb=answer)
    await bus.nc.flush()


async def test_a_send_nobody_answered_is_sent_again_with_the_same_id(
    bus: Bus, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(client_module, "SEND_ATTEMPT_TIMEOUT", 0.5)
    seen: list[str] = []
    await _service(bus, silent_for=2, seen=seen)
    event_id = await _client(bus).send_event(UserMessage(text="hello"), id="ev-1")
    assert event_id == "ev-1"
    assert seen == ["ev-1", "ev-1", "ev-1"]  # the same event each time: the stream drops copies


async def test_a_service_that_never_answers_is_a_timeout_after_the_retry_window(
    bus: Bus, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(client_module, "SEND_ATTEMPT_TIMEOUT", 0.3)
    monkeypatch.setattr(client_module, "SEND_RETRY_FOR", 1.5)
    seen: list[str] = []
    await _service(bus, silent_for=10_000, seen=seen)
    with pytest.raises(RequestTimeout):
        await _client(bus).send_event(UserMessage(text="hello"), id="ev-2")
    assert len(seen) >= 2 and set(seen) == {"ev-2"}
