"""A2A against the running gateway with the a2a-sdk's own client (JSON-RPC and HTTP+JSON).

One system per module (``a2a_fixtures``): card, send, stream, get, cancel, and an approval
answered through ``input-required``; each over both bindings where the SDK offers them.
"""

from __future__ import annotations

import asyncio
import collections
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest
from a2a.client import A2ACardResolver, Client, ClientConfig, ClientFactory
from a2a.helpers.proto_helpers import get_artifact_text, get_data_parts, get_text_parts
from a2a.types.a2a_pb2 import (
    CancelTaskRequest,
    GetTaskRequest,
    Message,
    Part,
    Role,
    SendMessageRequest,
    StreamResponse,
    SubscribeToTaskRequest,
    Task,
    TaskState,
)
from a2a.utils.constants import TransportProtocol
from a2a.utils.errors import InvalidParamsError, TaskNotFoundError, UnsupportedOperationError
from google.protobuf.json_format import ParseDict
from google.protobuf.struct_pb2 import Value

from jidocode.shared import subjects
from jidocode.shared.clients import ConversationsClient
from jidocode.shared.envelope import Envelope, new_id
from jidocode.shared.events.tools import ToolStarted
from tests.integration.gateway.a2a_fixtures import TURN_S, A2ASystem, a2a_system

__all__ = ["a2a_system"]

pytestmark = [pytest.mark.slow, pytest.mark.asyncio(loop_scope="module")]

BINDINGS = [TransportProtocol.JSONRPC.value, TransportProtocol.HTTP_JSON.value]


@asynccontextmanager
async def _client(
    system: A2ASystem, binding: str, *, streaming: bool, replica: bool = False
) -> AsyncIterator[Client]:
    """The SDK's client for ``binding``, built from the card (fetched with the token) of the
    first gateway, or of the second replica."""
    async with system.http() as http:
        config = ClientConfig(streaming=streaming, httpx_client=http, supported_protocol_bindings=[binding])
        url = system.replica_agent_url if replica else system.agent_url
        client = await ClientFactory(config).create_from_url(url)
        try:
            yield client
        finally:
            await client.close()


def _message(
    text: str = "", *, task_id: str = "", context_id: str = "", data: dict[str, Any] | None = None
) -> SendMessageRequest:
    parts = [Part(text=text)] if text else []
    if data is not None:
        value = Value()
        ParseDict(data, value)
        parts.append(Part(data=value))
    msg = Message(
        message_id=new_id(), role=Role.ROLE_USER, parts=parts, task_id=task_id, context_id=context_id
    )
    return SendMessageRequest(message=msg)


async def _events(client: Client, request: SendMessageRequest) -> list[StreamResponse]:
    async def collect() -> list[StreamResponse]:
        return [event async for event in client.send_message(request)]

    return await asyncio.wait_for(collect(), TURN_S)


def _final_task(events: list[StreamResponse]) -> Task:
    (response,) = events
    assert response.HasField("task"), response
    return response.task


# -- the card ---------------------------------------------------------------------


async def test_card_names_the_project_its_skills_bindings_and_the_bearer_scheme(
    a2a_system: A2ASystem,
) -> None:
    system = a2a_system
    async with system.http() as http:
        response = await http.get(f"{system.agent_url}/.well-known/agent-card.json")
        extended = await http.post(
            f"{system.agent_url}/a2a/jsonrpc",
            json={"jsonrpc": "2.0", "id": 1, "method": "GetExtendedAgentCard"},
            headers={"A2A-Version": "1.0"},
        )
    assert response.status_code == 200
    card = response.json()  # the public card (the same with the token): the project is in the extended one
    assert card["name"] == "JidoCode"
    assert extended.json()["result"]["name"] == "JidoCode: proj"
    skills = {s["name"]: s for s in extended.json()["result"]["skills"]}
    assert skills["review"]["description"] == "Review a change for bugs and style"
    interfaces = {(i["protocolBinding"], i["protocolVersion"]): i["url"] for i in card["supportedInterfaces"]}
    jsonrpc, rest = f"{system.agent_url}/a2a/jsonrpc", f"{system.agent_url}/a2a/rest"
    assert interfaces == {
        ("JSONRPC", "1.0"): jsonrpc,
        ("HTTP+JSON", "1.0"): rest,
        ("JSONRPC", "0.3"): jsonrpc,
        ("HTTP+JSON", "0.3"): rest,
    }
    assert (card["url"], card["preferredTransport"]) == (jsonrpc, "JSONRPC")  # what v0.3 clients read
    assert card["securitySchemes"]["bearer"]["httpAuthSecurityScheme"]["scheme"] == "Bearer"
    assert card["securityRequirements"] == [{"schemes": {"bearer": {}}}]
    assert card["capabilities"]["streaming"] is True


async def test_calls_need_the_token_and_a_known_project(a2a_system: A2ASystem) -> None:
    system = a2a_system
    async with httpx.AsyncClient(timeout=TURN_S) as anonymous:
        card = await anonymous.get(f"{system.agent_url}/.well-known/agent-card.json")
        rpc = await anonymous.post(f"{system.agent_url}/a2a/jsonrpc", json={"jsonrpc": "2.0", "id": 1})
        wrong = await anonymous.get(
            f"{system.agent_url}/a2a/rest/tasks/x", headers={"Authorization": "Bearer not-the-token"}
        )
        posted_card = await anonymous.post(f"{system.agent_url}/.well-known/agent-card.json", json={})
    assert card.status_code == 200  # the public card only (decision 0342)
    for response in (rpc, wrong, posted_card):
        assert response.status_code == 401
        assert response.json()["error"]["type"] == "unauthorized"
        assert system.token not in response.text
    async with system.http() as http:
        unknown = await http.get(f"{system.base_url}/projects/nosuchproject/.well-known/agent-card.json")
        bad = await http.post(f"{system.base_url}/projects/a.b/a2a/jsonrpc", json={})
    assert unknown.status_code == 404
    assert unknown.json()["error"]["type"] == "not_found"
    assert bad.status_code == 404


# -- send, get ----------------------------------------------------------------------


@pytest.mark.parametrize("binding", BINDINGS)
async def test_send_completes_the_task_and_get_reads_it_back(a2a_system: A2ASystem, binding: str) -> None:
    async with _client(a2a_system, binding, streaming=False) as client:
        task = _final_task(await _events(client, _message(f"hello over {binding}")))
        assert task.status.state == TaskState.TASK_STATE_COMPLETED
        assert task.context_id == task.id
        (artifact,) = task.artifacts
        assert get_artifact_text(artifact) == f"You said: hello over {binding}"

        got = await client.get_task(GetTaskRequest(id=task.id))
    assert got.status.state == TaskState.TASK_STATE_COMPLETED
    assert [get_artifact_text(a) for a in got.artifacts] == [f"You said: hello over {binding}"]
    roles = [(m.role, get_text_parts(m.parts)) for m in got.history]
    assert roles == [
        (Role.ROLE_USER, [f"hello over {binding}"]),
        (Role.ROLE_AGENT, [f"You said: hello over {binding}"]),
    ]
    # the task is the conversation: the service knows it by the same id
    timeline = await ConversationsClient(a2a_system.bus, a2a_system.project_id).get_projection(task.id)
    assert any(e["type"] == "conversation.user.message" for e in timeline.value)


async def test_get_of_an_unknown_task_is_task_not_found(a2a_system: A2ASystem) -> None:
    async with _client(a2a_system, TransportProtocol.JSONRPC.value, streaming=False) as client:
        with pytest.raises(TaskNotFoundError):
            await client.get_task(GetTaskRequest(id="no-such-task"))
        with pytest.raises(TaskNotFoundError):  # not even a bus token: never reaches a subject
            await client.get_task(GetTaskRequest(id="a.b>"))


async def test_a_context_id_names_a_new_task_and_must_be_a_bus_token(a2a_system: A2ASystem) -> None:
    async with _client(a2a_system, TransportProtocol.HTTP_JSON.value, streaming=False) as client:
        task = _final_task(await _events(client, _message("named", context_id="my-own-context-1")))
        assert (task.id, task.context_id) == ("my-own-context-1", "my-own-context-1")
        assert task.status.state == TaskState.TASK_STATE_COMPLETED
        with pytest.raises(InvalidParamsError, match="task id"):
            await _events(client, _message("bad", context_id="a.b"))


async def test_a_completed_task_takes_no_more_messages(a2a_system: A2ASystem) -> None:
    async with _client(a2a_system, TransportProtocol.JSONRPC.value, streaming=False) as client:
        task = _final_task(await _events(client, _message("first")))
        with pytest.raises(UnsupportedOperationError) as info:
            await _events(client, _message("second", task_id=task.id))
    assert "terminal" in str(info.value).lower()


# -- streaming ----------------------------------------------------------------------


@pytest.mark.parametrize("binding", BINDINGS)
async def test_stream_shows_working_then_answer_pieces_then_completed(
    a2a_system: A2ASystem, binding: str
) -> None:
    text = f"stream me please over {binding}"
    async with _client(a2a_system, binding, streaming=True) as client:
        events = await _events(client, _message(text))
    kinds = [e.WhichOneof("payload") for e in events]
    assert kinds[0] == "task"
    assert events[0].task.status.state == TaskState.TASK_STATE_SUBMITTED
    states = [e.status_update.status.state for e in events if e.HasField("status_update")]
    assert states[0] == TaskState.TASK_STATE_WORKING
    assert states[-1] == TaskState.TASK_STATE_COMPLETED
    pieces = [e.artifact_update for e in events if e.HasField("artifact_update")]
    assert len(pieces) >= 3  # several deltas, then the whole answer
    *deltas, final = pieces
    assert not deltas[0].append and all(d.append for d in deltas[1:])
    assert "".join(get_artifact_text(d.artifact) for d in deltas) == f"You said: {text}"
    assert final.last_chunk and not final.append
    assert get_artifact_text(final.artifact) == f"You said: {text}"
    assert kinds[-1] == "status_update"


# -- cancel -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("binding", "elsewhere"),
    [(TransportProtocol.JSONRPC.value, False), (TransportProtocol.HTTP_JSON.value, True)],
)
async def test_cancel_stops_the_conversation(a2a_system: A2ASystem, binding: str, elsewhere: bool) -> None:
    """Cancelled on the replica streaming the turn, or on another one (through the task store);
    a subscriber (``SubscribeToTask``) on the other replica follows the turn to its end."""
    working: asyncio.Future[str] = asyncio.get_running_loop().create_future()
    subscribed: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    async def stream() -> list[StreamResponse]:
        seen = []
        async for event in client.send_message(_message("wait for a minute")):
            seen.append(event)
            if event.HasField("status_update") and not working.done():
                working.set_result(event.status_update.task_id)
        return seen

    async def subscribe(task_id: str) -> list[StreamResponse]:
        seen = []
        async for event in watcher.subscribe(SubscribeToTaskRequest(id=task_id)):
            seen.append(event)
            if not subscribed.done():
                subscribed.set_result(None)
        return seen

    started: dict[str, asyncio.Event] = collections.defaultdict(asyncio.Event)

    async def on_tool_started(env: Envelope) -> None:
        started[str((env.data or {}).get("conversation_id"))].set()

    tools = await a2a_system.bus.subscribe(subjects.signal(ToolStarted.TYPE), on_tool_started)
    await a2a_system.bus.nc.flush()
    async with (
        _client(a2a_system, binding, streaming=True) as client,
        _client(a2a_system, binding, streaming=True, replica=True) as watcher,
    ):
        canceller = watcher if elsewhere else client
        streaming = asyncio.create_task(stream())
        task_id = await asyncio.wait_for(working, TURN_S)
        # cancelled while its tool runs (a model call cut short leaves litellm's coroutine behind)
        await asyncio.wait_for(started[task_id].wait(), TURN_S)
        await tools.unsubscribe()
        following = asyncio.create_task(subscribe(task_id))
        await asyncio.wait_for(subscribed, TURN_S)
        cancelled = await canceller.cancel_task(CancelTaskRequest(id=task_id))
        assert cancelled.status.state == TaskState.TASK_STATE_CANCELED
        seen = await asyncio.wait_for(streaming, TURN_S)
        followed = await asyncio.wait_for(following, TURN_S)
        got = await client.get_task(GetTaskRequest(id=task_id))
    # the subscriber's replica does not run the turn: it follows it on the conversation's output
    assert followed[0].task.status.state == TaskState.TASK_STATE_WORKING
    assert followed[-1].status_update.status.state == TaskState.TASK_STATE_CANCELED
    if elsewhere:  # the streaming replica learnt it from the conversation's cancel
        assert seen[-1].status_update.status.state == TaskState.TASK_STATE_CANCELED
    assert got.status.state == TaskState.TASK_STATE_CANCELED
    diagnostics = await ConversationsClient(a2a_system.bus, a2a_system.project_id).get_projection(
        task_id, "diagnostics"
    )
    assert diagnostics.value["status"] == "cancelled"


# -- input-required -------------------------------------------------------------------


async def _ask(client: Client) -> Task:
    events = await _events(client, _message("write after into ask/x.txt"))
    task = _final_task(events)
    assert task.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
    return task


async def test_an_approval_is_input_required_and_the_next_message_answers_it(a2a_system: A2ASystem) -> None:
    system = a2a_system
    (system.project / "ask" / "x.txt").write_text("before\n")
    async with _client(system, TransportProtocol.JSONRPC.value, streaming=False) as client:
        task = await _ask(client)
        (question,) = get_data_parts(task.status.message.parts)
        assert question["tool"] == "write_file"
        assert question["args"]["path"] == "ask/x.txt"
        assert "allow" in get_text_parts(task.status.message.parts)[0]
        # another replica reads the same state back from the conversation, and takes the answer
        async with _client(system, TransportProtocol.JSONRPC.value, streaming=False, replica=True) as other:
            got = await other.get_task(GetTaskRequest(id=task.id))
            assert got.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
            assert get_data_parts(got.status.message.parts) == [question]

            unclear = _final_task(await _events(other, _message("maybe later", task_id=task.id)))
            assert unclear.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
            assert "'maybe later' is no answer" in get_text_parts(unclear.status.message.parts)[0]

            done = _final_task(await _events(other, _message("allow", task_id=task.id)))
        assert done.status.state == TaskState.TASK_STATE_COMPLETED
        assert get_artifact_text(done.artifacts[0]).startswith("Done:")
        assert (system.project / "ask" / "x.txt").read_text() == "after\n"
        # the first replica still holds the task parked: it learns from the conversation
        with pytest.raises(UnsupportedOperationError, match="completed"):
            await _events(client, _message("and now?", task_id=task.id))


async def test_a_data_part_denies_over_rest_while_streaming(a2a_system: A2ASystem) -> None:
    system = a2a_system
    (system.project / "ask" / "x.txt").write_text("before\n")
    async with _client(system, TransportProtocol.HTTP_JSON.value, streaming=True) as client:
        events = await _events(client, _message("write after into ask/x.txt"))
        last = events[-1].status_update
        assert last.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
        (question,) = get_data_parts(last.status.message.parts)
        answer = {"decision": "deny", "request_id": question["request_id"]}
        events = await _events(client, _message(task_id=last.task_id, data=answer))
    states = [e.status_update.status.state for e in events if e.HasField("status_update")]
    assert states[-1] == TaskState.TASK_STATE_COMPLETED
    assert (system.project / "ask" / "x.txt").read_text() == "before\n"


async def test_two_questions_of_one_turn_are_asked_one_after_the_other(a2a_system: A2ASystem) -> None:
    system = a2a_system
    async with _client(system, TransportProtocol.JSONRPC.value, streaming=False) as client:
        first = _final_task(await _events(client, _message("write both files")))
        assert first.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
        (asked_first,) = get_data_parts(first.status.message.parts)
        second = _final_task(await _events(client, _message("allow", task_id=first.id)))
        assert second.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
        (asked_second,) = get_data_parts(second.status.message.parts)
        assert asked_second["request_id"] != asked_first["request_id"]
        done = _final_task(await _events(client, _message("deny", task_id=first.id)))
    assert done.status.state == TaskState.TASK_STATE_COMPLETED
    written = {asked_first["args"]["path"]: "after\n", asked_second["args"]["path"]: None}
    for path, content in written.items():
        assert (system.project / path).exists() == (content is not None)


async def test_a_message_over_the_conversation_limit_is_invalid_params_and_leaves_no_task(
    a2a_system: A2ASystem,
) -> None:
    conversations = ConversationsClient(a2a_system.bus, a2a_system.project_id)
    before = {c.conversation_id for c in (await conversations.list()).conversations}
    async with _client(a2a_system, TransportProtocol.JSONRPC.value, streaming=False) as client:
        with pytest.raises(InvalidParamsError, match="262144"):
            await _events(client, _message("x" * 300_000, context_id="too-big-1"))
        with pytest.raises(TaskNotFoundError):
            await client.get_task(GetTaskRequest(id="too-big-1"))
        with pytest.raises(InvalidParamsError, match="no text and no data"):
            await _events(client, _message("   ", context_id="blank-1"))
    after = {c.conversation_id for c in (await conversations.list()).conversations}
    assert after == before


@pytest.mark.parametrize("binding", BINDINGS)
async def test_a_v0_3_client_is_served_too(a2a_system: A2ASystem, binding: str) -> None:
    """The SDK's v0.3 transports (what clients of older SDKs speak) against the same endpoints."""
    system = a2a_system
    async with system.http() as http:
        card = await A2ACardResolver(http, system.agent_url).get_agent_card()
        legacy = [i for i in card.supported_interfaces if i.protocol_version == "0.3"]
        del card.supported_interfaces[:]
        card.supported_interfaces.extend(legacy)
        config = ClientConfig(streaming=False, httpx_client=http, supported_protocol_bindings=[binding])
        client = ClientFactory(config).create(card)
        try:
            task = _final_task(await _events(client, _message(f"old hello over {binding}")))
            got = await client.get_task(GetTaskRequest(id=task.id))
        finally:
            await client.close()
    assert task.status.state == TaskState.TASK_STATE_COMPLETED
    assert get_artifact_text(task.artifacts[0]) == f"You said: old hello over {binding}"
    assert got.status.state == TaskState.TASK_STATE_COMPLETED
