"""A request of the wrong type, sent to the real services over a real nats-server, is an
``invalid_input`` error naming the type received, the type expected, the endpoint and where
that type is served, never a schema error of the expected type's fields."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from typing import Any

import orjson
import pytest

from jidocode.services.registry import serve_many
from jidocode.shared.bus import Bus
from jidocode.shared.config import Config
from tests.helpers import wait_for_services

NAMES = ("engine", "project")


@pytest.fixture
async def system(config: Config) -> AsyncIterator[Config]:
    stop = asyncio.Event()
    task = asyncio.create_task(serve_many(config, stop, NAMES))
    try:
        await wait_for_services(config, NAMES, timeout=20)
        yield config
    finally:
        stop.set()
        await asyncio.wait_for(task, 20)


def _event(type_: str, data: Any) -> dict[str, Any]:
    return {"specversion": "1.0", "id": uuid.uuid4().hex, "source": "client/1", "type": type_, "data": data}


async def _error(bus: Bus, subject: str, payload: bytes, headers: dict[str, str] | None = None) -> Any:
    msg = await bus.nc.request(subject, payload, headers=headers, timeout=30)
    reply = orjson.loads(msg.data)
    assert reply["type"] == "error", reply
    return reply["data"]


async def test_another_commands_request_names_both_types_the_endpoint_and_where_it_goes(
    system: Config, bus: Bus
) -> None:
    # data that the expected command (engine.start_project: root_path required) would refuse
    sent = _event("conversation.cmd.start", {"conversation_id": "c1"})
    error = await _error(bus, "jido.engine.start_project", orjson.dumps(sent))
    assert error["type"] == "invalid_input" and not error["retryable"]
    assert error["details"] == {
        "expected": "engine.start_project",
        "type": "conversation.cmd.start",
        "endpoint": "engine.start_project",
        "served_on": ["jido.conversations.*.start"],
    }
    message = error["message"]
    assert message.startswith(
        "engine.start_project (on jido.engine.start_project) expected a 'engine.start_project' request, "
        "got 'conversation.cmd.start'"
    )
    assert "jido.conversations.*.start" in message
    assert "root_path" not in message and "required" not in message.lower()


async def test_a_type_served_twice_names_both_places(system: Config, bus: Bus) -> None:
    sent = _event("tool.run", {"name": "read_file", "args": {}, "meta": {"request_id": "r"}})
    error = await _error(bus, "jido.project.P1.list_tools", orjson.dumps(sent))
    assert error["type"] == "invalid_input"
    assert error["details"]["expected"] == "tool.list" and error["details"]["type"] == "tool.run"
    assert error["details"]["endpoint"] == "project.list_tools"
    assert error["details"]["served_on"] == ["jido.tools.*.run", "jido.assets.*.call_tool"]


async def test_a_type_of_no_catalogue_says_so(system: Config, bus: Bus) -> None:
    error = await _error(bus, "jido.engine.list_projects", orjson.dumps(_event("my.own.thing", {"x": 1})))
    assert error["type"] == "invalid_input"
    assert "got 'my.own.thing'" in error["message"] and "no type of the catalogue" in error["message"]
    assert "served_on" not in error["details"]


async def test_binary_mode_is_checked_the_same_way(system: Config, bus: Bus) -> None:
    headers = {
        "ce-specversion": "1.0",
        "ce-id": "b1",
        "ce-source": "client/1",
        "ce-type": "engine.list_projects",
    }
    error = await _error(bus, "jido.engine.stop_project", b"{}", headers)
    assert error["type"] == "invalid_input"
    assert error["details"]["expected"] == "engine.stop_project"
    assert error["details"]["type"] == "engine.list_projects"
    assert error["details"]["served_on"] == ["jido.engine.list_projects"]
    assert "project_id" not in error["message"]  # stop_project's required field is not the complaint
