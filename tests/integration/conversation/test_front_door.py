"""The project service's conversation front door, forwarding to the conversation service."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from jidocode.services.project.conversations import register
from jidocode.shared import subjects
from jidocode.shared.bus import Bus
from jidocode.shared.config import Config
from jidocode.shared.errors import InvalidInput, NotFound
from jidocode.shared.events.conversation import (
    GetProjection,
    SendEvent,
    StartConversation,
    StopConversation,
    Subscribe,
)
from jidocode.shared.events.engine import ProjectInfo
from jidocode.shared.service import ServiceHost

from ._support import P, ScriptLlm, ToolsDouble, answer, follow, running_service


class Directory:
    """The engine's registry as the project service sees it: one known project."""

    def __init__(self, root: Path) -> None:
        self.root = root

    async def get(self, project_id: str) -> ProjectInfo:
        if project_id != P:
            raise NotFound(f"unknown project id {project_id!r}")
        return ProjectInfo(project_id=P, root_path=str(self.root), started_at="2026-01-01T00:00:00Z")


@pytest.fixture
async def front_door(config: Config, tmp_path: Path) -> AsyncIterator[None]:
    (tmp_path / "proj" / ".jido").mkdir(parents=True)
    (tmp_path / "proj" / ".jido" / "settings.json").write_text(
        '{"llm": {"model": "openai/x", "max_turns": 7}}'
    )
    bus = await Bus.connect(config, "project")
    host = ServiceHost(bus, name="project")
    register(host, bus, Directory(tmp_path / "proj"))
    await host.start()
    try:
        yield
    finally:
        await host.stop()
        await bus.close()


async def test_front_door_round_trip(bus: Bus, config: Config, front_door: None) -> None:
    llm = ScriptLlm(answer("hello from the model"))
    async with running_service(config, llm, ToolsDouble()):
        started = await bus.request(subjects.project(P, "start_conversation"), StartConversation())
        cid = started["conversation_id"]
        # the project's settings.json llm section became the conversation's settings
        assert started["settings"]["model"] == "openai/x" and started["settings"]["max_turns"] == 7
        out = await follow(bus, cid)
        info = await bus.request(subjects.project(P, "subscribe"), Subscribe(conversation_id=cid))
        assert info["subject"] == subjects.conversation_out_filter(P, cid) and info["start_sequence"] == 1
        sent = await bus.request(
            subjects.project(P, "send_event"),
            SendEvent(conversation_id=cid, event_type="conversation.user.message", data={"text": "hi"}),
        )
        assert sent["id"] and sent["correlation_id"]  # ensured at the edge (the request's correlation)
        await out.wait_type("conversation.assistant.message")
        assert llm.requests[0].settings["model"] == "openai/x"
        timeline = await bus.request(
            subjects.project(P, "get_projection"), GetProjection(conversation_id=cid, name="timeline")
        )
        assert timeline[0]["id"] == sent["id"]
        assert {e["correlation_id"] for e in timeline} == {sent["correlation_id"]}
        with pytest.raises(InvalidInput):
            await bus.request(
                subjects.project(P, "send_event"),
                SendEvent(conversation_id=cid, event_type="conversation.error", data={}),
            )
        stopped = await bus.request(
            subjects.project(P, "stop_conversation"), StopConversation(conversation_id=cid)
        )
        assert stopped["status"] == "stopped"
        from jidocode.shared.errors import Conflict

        with pytest.raises(Conflict):
            await bus.request(
                subjects.project(P, "send_event"),
                SendEvent(conversation_id=cid, event_type="conversation.user.message", data={"text": "x"}),
            )
        # reopening keeps the journal
        await bus.request(subjects.project(P, "start_conversation"), StartConversation(conversation_id=cid))
        again = await bus.request(
            subjects.project(P, "get_projection"),
            GetProjection(conversation_id=cid, name="canonical_timeline"),
        )
        assert again == timeline


async def test_unknown_project_is_not_found(bus: Bus, config: Config, front_door: None) -> None:
    with pytest.raises(NotFound):
        await bus.request(subjects.project("other", "start_conversation"), StartConversation())
    with pytest.raises(NotFound):
        await bus.request(
            subjects.project("other", "get_projection"), GetProjection(conversation_id="c", name="timeline")
        )
