"""A2A v1.0 beyond the basics, with the a2a-sdk's own client: ``ListTasks`` (filters, pages,
ended conversations), the client's ``messageId`` kept in ``GetTask``'s history, the card's
skills (commands, workflows, the tool set), discovery with or without a trailing slash, and
what a client sending no ``A2A-Version`` gets.

One system per module (``a2a_fixtures``); ``test_a2a.py`` covers send, stream, get, cancel,
subscribe and approvals.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any
from urllib.parse import urljoin

import httpx
import pytest
from a2a.client import A2ACardResolver, Client, ClientConfig, ClientFactory
from a2a.helpers.proto_helpers import get_artifact_text
from a2a.types.a2a_pb2 import (
    GetExtendedAgentCardRequest,
    GetTaskRequest,
    ListTasksRequest,
    Message,
    Part,
    Role,
    SendMessageRequest,
    Task,
    TaskState,
)
from a2a.utils.constants import VERSION_HEADER, TransportProtocol
from a2a.utils.errors import InvalidParamsError

from jidocode.services.gateway.a2a.card import TOOLS_EXTENSION
from jidocode.shared.clients import ConversationsClient, EngineClient
from jidocode.shared.envelope import new_id
from tests.integration.gateway.a2a_fixtures import TURN_S, A2ASystem, a2a_system

__all__ = ["a2a_system"]

pytestmark = [pytest.mark.slow, pytest.mark.asyncio(loop_scope="module")]

BINDINGS = [TransportProtocol.JSONRPC.value, TransportProtocol.HTTP_JSON.value]


@asynccontextmanager
async def _client(system: A2ASystem, binding: str, *, url: str | None = None) -> AsyncIterator[Client]:
    """The SDK's (non-streaming) client for ``binding``, built from the card at ``url``."""
    async with system.http() as http:
        config = ClientConfig(streaming=False, httpx_client=http, supported_protocol_bindings=[binding])
        client = await ClientFactory(config).create_from_url(url or system.agent_url)
        try:
            yield client
        finally:
            await client.close()


def _http_v1(system: A2ASystem) -> httpx.AsyncClient:
    """An HTTP client with the token that says it speaks A2A v1.0 (as the SDKs' 1.x clients do)."""
    return httpx.AsyncClient(
        headers={"Authorization": f"Bearer {system.token}", VERSION_HEADER: "1.0"}, timeout=TURN_S
    )


async def _ask(client: Client, text: str, *, message_id: str | None = None) -> Task:
    """A new task of ``text``, once the SDK returns it (``completed`` with the echo model)."""
    message = Message(message_id=message_id or new_id(), role=Role.ROLE_USER, parts=[Part(text=text)])

    async def send() -> Task:
        (response,) = [r async for r in client.send_message(SendMessageRequest(message=message))]
        assert response.HasField("task"), response
        return response.task

    return await asyncio.wait_for(send(), TURN_S)


async def _all_pages(client: Client, request: ListTasksRequest) -> list[Task]:
    """Every task of the listing, page after page (the tokens the server hands out)."""
    tasks: list[Task] = []
    while True:
        page = await client.list_tasks(request)
        tasks.extend(page.tasks)
        assert page.page_size == len(page.tasks)
        if not page.next_page_token:
            return tasks
        request.page_token = page.next_page_token


# -- ListTasks ----------------------------------------------------------------------


@pytest.mark.parametrize("binding", BINDINGS)
async def test_list_tasks_pages_through_running_and_ended_tasks(a2a_system: A2ASystem, binding: str) -> None:
    async with _client(a2a_system, binding) as client:
        made = [await _ask(client, f"list {binding} {i}") for i in range(3)]
        ids = [t.id for t in made]
        # an ended conversation is still a task
        await ConversationsClient(a2a_system.bus, a2a_system.project_id).stop(ids[0])

        first = await client.list_tasks(ListTasksRequest(page_size=2))
        assert len(first.tasks) == 2 and first.page_size == 2 and first.next_page_token
        assert first.total_size >= 3
        listed = await _all_pages(client, ListTasksRequest(page_size=2))
        assert len(listed) == first.total_size
        assert len({t.id for t in listed}) == len(listed)  # no task twice across pages
        assert set(ids) <= {t.id for t in listed}
        # newest activity first (the SDK's order)
        stamps = [t.status.timestamp.ToNanoseconds() for t in listed]
        assert stamps == sorted(stamps, reverse=True)
        for task in listed:
            if task.id in ids:
                assert task.status.state == TaskState.TASK_STATE_COMPLETED
                assert not task.artifacts  # only with include_artifacts
                assert [m.role for m in task.history] == [Role.ROLE_USER, Role.ROLE_AGENT]


async def test_list_tasks_filters_by_context_status_and_time(a2a_system: A2ASystem) -> None:
    async with _client(a2a_system, TransportProtocol.JSONRPC.value) as client:
        task = await _ask(client, "filter me")
        by_context = await client.list_tasks(ListTasksRequest(context_id=task.id, include_artifacts=True))
        (only,) = by_context.tasks
        assert only.id == task.id and by_context.total_size == 1
        assert [get_artifact_text(a) for a in only.artifacts] == ["You said: filter me"]

        completed = await client.list_tasks(ListTasksRequest(status=TaskState.TASK_STATE_COMPLETED))
        assert task.id in {t.id for t in completed.tasks}
        working = await client.list_tasks(ListTasksRequest(status=TaskState.TASK_STATE_WORKING))
        assert task.id not in {t.id for t in working.tasks}

        since = ListTasksRequest(context_id=task.id)
        since.status_timestamp_after.CopyFrom(only.status.timestamp)
        assert [t.id for t in (await client.list_tasks(since)).tasks] == [task.id]
        since.status_timestamp_after.FromNanoseconds(only.status.timestamp.ToNanoseconds() + 1_000_000)
        assert not (await client.list_tasks(since)).tasks

        bare = await client.list_tasks(ListTasksRequest(context_id=task.id, history_length=0))
        assert not bare.tasks[0].history
        none = await client.list_tasks(ListTasksRequest(context_id="no-such-task"))
        assert (list(none.tasks), none.total_size, none.page_size, none.next_page_token) == ([], 0, 0, "")


async def test_list_tasks_shows_only_the_projects_own_tasks(a2a_system: A2ASystem) -> None:
    other_root = a2a_system.project.parent / "other"
    other_root.mkdir(exist_ok=True)
    engine = EngineClient(a2a_system.bus, timeout=30)
    other = await engine.start_project(str(other_root))
    try:
        other_url = f"{a2a_system.base_url}/projects/{other.project_id}"
        async with _client(a2a_system, TransportProtocol.JSONRPC.value, url=other_url) as client:
            theirs = await _ask(client, "in the other project")
            their_list = await _all_pages(client, ListTasksRequest())
        async with _client(a2a_system, TransportProtocol.JSONRPC.value) as client:
            ours = await _ask(client, "in ours")
            our_list = await _all_pages(client, ListTasksRequest())
    finally:
        await engine.stop_project(other.project_id)
    assert [t.id for t in their_list] == [theirs.id]
    assert ours.id in {t.id for t in our_list} and theirs.id not in {t.id for t in our_list}


async def test_a_foreign_page_token_or_an_unknown_status_is_invalid_params(a2a_system: A2ASystem) -> None:
    async with _client(a2a_system, TransportProtocol.JSONRPC.value) as client:
        with pytest.raises(InvalidParamsError, match="page token"):
            await client.list_tasks(ListTasksRequest(page_token="not-a-token-of-ours"))
    async with _http_v1(a2a_system) as http:
        response = await http.post(
            f"{a2a_system.agent_url}/a2a/jsonrpc",
            json={"jsonrpc": "2.0", "id": 7, "method": "ListTasks", "params": {"status": "ALMOST_DONE"}},
        )
        rest = await http.get(f"{a2a_system.agent_url}/a2a/rest/tasks", params={"status": "ALMOST_DONE"})
        by_number = await http.get(f"{a2a_system.agent_url}/a2a/rest/tasks", params={"status": "3"})
        unset = await http.post(  # what the JS SDK sends for a status its caller left unset
            f"{a2a_system.agent_url}/a2a/jsonrpc",
            json={"jsonrpc": "2.0", "id": 8, "method": "ListTasks", "params": {"status": "UNRECOGNIZED"}},
        )
    assert "tasks" in unset.json()["result"]
    error = response.json()["error"]
    assert (response.json()["id"], error["code"]) == (7, -32602)
    assert "ALMOST_DONE" in error["message"] and "TASK_STATE_WORKING" in error["message"]
    assert (rest.status_code, rest.json()["error"]["status"]) == (400, "INVALID_ARGUMENT")
    assert "ALMOST_DONE" in rest.json()["error"]["message"]
    assert by_number.status_code == 200  # 3 is TASK_STATE_COMPLETED's number
    assert all(t["status"]["state"] == "TASK_STATE_COMPLETED" for t in by_number.json()["tasks"])


# -- history ------------------------------------------------------------------------


@pytest.mark.parametrize("binding", BINDINGS)
async def test_get_task_history_keeps_the_clients_message_id(a2a_system: A2ASystem, binding: str) -> None:
    mine = f"client-msg-{binding.lower().replace('+', '-')}-{new_id()}"
    async with _client(a2a_system, binding) as client:
        task = await _ask(client, "whose id?", message_id=mine)
        got = await client.get_task(GetTaskRequest(id=task.id))
    user, agent = got.history
    assert (user.role, user.message_id) == (Role.ROLE_USER, mine)
    assert agent.message_id and agent.message_id != mine


async def test_a_message_id_that_is_no_plain_token_gets_a_server_id(a2a_system: A2ASystem) -> None:
    async with _client(a2a_system, TransportProtocol.JSONRPC.value) as client:
        task = await _ask(client, "odd id", message_id="has spaces\nand a newline")
        got = await client.get_task(GetTaskRequest(id=task.id))
    assert got.history[0].message_id and " " not in got.history[0].message_id


# -- the card and discovery ---------------------------------------------------------


async def test_the_extended_card_lists_skills_commands_workflows_and_the_tool_set(
    a2a_system: A2ASystem,
) -> None:
    async with _http_v1(a2a_system) as http:
        card = await _extended_card(http, a2a_system.agent_url)
        public = (await http.get(f"{a2a_system.agent_url}/.well-known/agent-card.json")).json()
    skills = {s["id"]: s for s in card["skills"]}
    assert skills["skill:review"]["description"] == "Review a change for bugs and style"
    assert skills["command:explain"]["name"] == "/explain"
    assert skills["command:explain"]["description"] == "Explain a file"
    assert skills["command:explain"]["examples"] == ["/explain"]
    assert skills["workflow:tidy"]["description"] == "Tidy the project"
    (tools,) = [e for e in card["capabilities"]["extensions"] if e["uri"] == TOOLS_EXTENSION]
    names = {t["name"] for t in tools["params"]["tools"]}
    assert {"read_file", "write_file", "bash"} <= names
    assert not tools.get("required", False)
    # a v1.0 client gets the v1.0 card alone: no v0.3 fields merged in
    assert "url" not in public and "preferredTransport" not in public
    assert set(public["securitySchemes"]["bearer"]) == {"httpAuthSecurityScheme"}
    assert set(card["securitySchemes"]["bearer"]) == {"httpAuthSecurityScheme"}


@pytest.mark.parametrize("suffix", ["", "/", "/a2a", "/a2a/"])
async def test_discovery_with_or_without_a_trailing_slash(a2a_system: A2ASystem, suffix: str) -> None:
    base = a2a_system.agent_url + suffix
    async with _client(a2a_system, TransportProtocol.JSONRPC.value, url=base) as client:
        task = await _ask(client, f"base {suffix!r}")
    assert task.status.state == TaskState.TASK_STATE_COMPLETED
    async with _http_v1(a2a_system) as http:
        joined = await http.get(f"{base}/.well-known/agent-card.json")  # "<base>/" + "/.well-known/…"
        resolved = await http.get(urljoin(base, ".well-known/agent-card.json"))  # the JS SDK's way
    assert joined.status_code == 200 and joined.json()["name"] == "JidoCode"
    if suffix == "":  # ".../projects/<p>" resolves to ".../projects/.well-known/…": no project in it
        assert resolved.status_code == 404
        assert "trailing slash" in resolved.json()["error"]["message"]
    else:
        assert resolved.status_code == 200 and resolved.json()["name"] == "JidoCode"


@pytest.mark.parametrize("slash", ["", "/"])
async def test_json_rpc_answers_at_the_base_url_too(a2a_system: A2ASystem, slash: str) -> None:
    async with _client(a2a_system, TransportProtocol.JSONRPC.value) as client:
        task = await _ask(client, "at the base")
    async with _http_v1(a2a_system) as http:
        at_base = await http.post(
            a2a_system.agent_url + slash,
            json={"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": task.id}},
        )
    assert at_base.json()["result"]["id"] == task.id


# -- clients without A2A-Version ------------------------------------------------------


async def test_a_client_without_a_version_gets_v0_3_or_a_refusal_naming_1_0(a2a_system: A2ASystem) -> None:
    url = f"{a2a_system.agent_url}/a2a/jsonrpc"
    message = {"messageId": new_id(), "role": "user", "parts": [{"kind": "text", "text": "old client"}]}
    async with a2a_system.http() as http:  # no A2A-Version header: a v0.3 client
        v03 = await http.post(
            url, json={"jsonrpc": "2.0", "id": 1, "method": "message/send", "params": {"message": message}}
        )
        v10 = await http.post(
            url, json={"jsonrpc": "2.0", "id": 2, "method": "GetTask", "params": {"id": "anything"}}
        )
        card = (await http.get(f"{a2a_system.agent_url}/.well-known/agent-card.json")).json()
    task = v03.json()["result"]
    assert (task["kind"], task["status"]["state"]) == ("task", "completed")  # the v0.3 shapes
    assert task["history"][0]["messageId"] == message["messageId"]
    error = v10.json()["error"]
    assert error["code"] == -32009  # VersionNotSupported
    assert "1.0" in error["message"]
    assert card["url"].endswith("/a2a/jsonrpc") and card["preferredTransport"] == "JSONRPC"


async def test_the_anonymous_stay_out_of_the_new_routes(a2a_system: A2ASystem) -> None:
    async with httpx.AsyncClient(timeout=TURN_S) as anonymous:
        card = await anonymous.get(f"{a2a_system.agent_url}//.well-known/agent-card.json")
        rpc = await anonymous.post(f"{a2a_system.agent_url}/", json={"jsonrpc": "2.0", "id": 1})
        # the version as a query parameter (A2A allows it for clients that cannot set headers)
        by_query = await anonymous.get(f"{a2a_system.agent_url}/.well-known/agent-card.json?A2A-Version=1.0")
    assert (card.status_code, rpc.status_code) == (200, 401)  # the public card only (decision 0342)
    assert "url" in card.json() and "url" not in by_query.json()  # the v0.3 fields only for v0.3 clients


# -- the public card and the extended card (decision 0342) ------------------------------

#: Names of a project that only its extended card may show.
_DISTINCT_FOLDER = "quokka-ledger-5821"
_DISTINCT_COMMAND = "zanzibar-deploy"


def _without_urls(card: dict[str, Any], agent_url: str) -> str:
    """The card as text, the agent's URL (which names the project id the client asked for) cut out."""
    return json.dumps(card).replace(agent_url + "/a2a/", "<agent>/")


async def _anonymous_cards(agent_url: str) -> list[httpx.Response]:
    """The card at every path a client may ask for it, without the token, as v1.0 and v0.3 clients."""
    async with httpx.AsyncClient(timeout=TURN_S) as anonymous:
        return [
            await anonymous.get(f"{agent_url}{under}/.well-known/agent-card.json", headers=headers)
            for under in ("", "/", "/a2a", "/a2a/")
            for headers in ({VERSION_HEADER: "1.0"}, {})
        ]


async def _extended_card(http: httpx.AsyncClient, agent_url: str) -> dict[str, Any]:
    response = await http.post(
        f"{agent_url}/a2a/jsonrpc", json={"jsonrpc": "2.0", "id": 1, "method": "GetExtendedAgentCard"}
    )
    result: dict[str, Any] = response.json()["result"]
    return result


async def test_the_public_card_reveals_nothing_of_the_project(a2a_system: A2ASystem) -> None:
    root = a2a_system.project.parent / _DISTINCT_FOLDER
    (root / ".jido" / "commands").mkdir(parents=True, exist_ok=True)
    (root / ".jido" / "commands" / f"{_DISTINCT_COMMAND}.md").write_text(
        "---\ndescription: Ship the ledger\n---\nShip it\n"
    )
    engine = EngineClient(a2a_system.bus, timeout=30)
    project = await engine.start_project(str(root))
    agent_url = f"{a2a_system.base_url}/projects/{project.project_id}"
    try:
        cards = await _anonymous_cards(agent_url)
        async with _http_v1(a2a_system) as http:
            extended = await _extended_card(http, agent_url)
    finally:
        await engine.stop_project(project.project_id)
    hidden = [
        _DISTINCT_FOLDER,
        str(root),
        project.project_id,
        _DISTINCT_COMMAND,
        "write_file",
        TOOLS_EXTENSION,
    ]
    for response in cards:
        assert response.status_code == 200, response.text
        card = response.json()
        assert not [s for s in hidden if s in _without_urls(card, agent_url)], card
        assert card["name"] == "JidoCode"
        assert [s["id"] for s in card["skills"]] == ["conversation"]
        assert card["capabilities"]["extendedAgentCard"] is True
        assert card["securitySchemes"]["bearer"]["httpAuthSecurityScheme"]["scheme"] == "Bearer"
        urls = {i["url"] for i in card["supportedInterfaces"]}
        assert urls == {f"{agent_url}/a2a/jsonrpc", f"{agent_url}/a2a/rest"}
    v03 = cards[1].json()  # no A2A-Version: the v0.3 fields too
    assert v03["supportsAuthenticatedExtendedCard"] is True and v03["url"] == f"{agent_url}/a2a/jsonrpc"
    # what the public card hides, the extended card shows (to the token's holder)
    assert extended["name"] == f"JidoCode: {_DISTINCT_FOLDER}" and str(root) in extended["description"]
    assert f"command:{_DISTINCT_COMMAND}" in {s["id"] for s in extended["skills"]}


async def test_an_anonymous_caller_learns_no_projects_state(a2a_system: A2ASystem) -> None:
    stopped_root = a2a_system.project.parent / "stopped-one"
    stopped_root.mkdir(exist_ok=True)
    engine = EngineClient(a2a_system.bus, timeout=30)
    stopped = await engine.start_project(str(stopped_root))
    await engine.stop_project(stopped.project_id)
    card = "/.well-known/agent-card.json"
    async with httpx.AsyncClient(base_url=a2a_system.base_url, timeout=TURN_S) as anonymous:
        answers = [
            await anonymous.get(f"/projects/{project}{card}")
            for project in (stopped.project_id, "01J0000000000000000000NOPE", "a.b")
        ]
        root = await anonymous.get(card)  # the gateway is no agent: each project is one
    assert {(r.status_code, r.json()["error"]["message"]) for r in answers[:2]} == {
        (404, "no running agent at this URL")
    }
    assert answers[2].status_code == 404 and stopped.project_id not in answers[2].text
    assert root.status_code == 404 and "/projects/<project id>/" in root.json()["error"]["message"]
    async with _http_v1(a2a_system) as http:  # the token's holder is told what is wrong
        told = await http.get(f"{a2a_system.base_url}/projects/{stopped.project_id}{card}")
    assert told.status_code == 409 and "stopped" in told.json()["error"]["message"]


async def test_the_extended_card_needs_the_token_and_lists_the_skills(a2a_system: A2ASystem) -> None:
    url = a2a_system.agent_url
    async with httpx.AsyncClient(timeout=TURN_S, headers={VERSION_HEADER: "1.0"}) as anonymous:
        refused = [
            await anonymous.post(
                f"{url}/a2a/jsonrpc", json={"jsonrpc": "2.0", "id": 1, "method": "GetExtendedAgentCard"}
            ),
            await anonymous.get(f"{url}/a2a/rest/extendedAgentCard"),
            await anonymous.get(f"{url}/a2a/rest/v1/card"),
        ]
    assert [r.status_code for r in refused] == [401, 401, 401]
    async with _http_v1(a2a_system) as http:  # both bindings, with the token
        over_rpc = await _extended_card(http, url)
        over_rest = (await http.get(f"{url}/a2a/rest/extendedAgentCard")).json()
    for card in (over_rpc, over_rest):
        assert card["name"] == "JidoCode: proj"
        assert {"skill:review", "command:explain", "workflow:tidy"} <= {s["id"] for s in card["skills"]}
        (tools,) = [e for e in card["capabilities"]["extensions"] if e["uri"] == TOOLS_EXTENSION]
        assert "write_file" in {t["name"] for t in tools["params"]["tools"]}
        assert {i["url"] for i in card["supportedInterfaces"]} == {f"{url}/a2a/jsonrpc", f"{url}/a2a/rest"}


async def test_a_v0_3_client_gets_the_extended_card_too(a2a_system: A2ASystem) -> None:
    async with a2a_system.http() as http:  # no A2A-Version: a v0.3 client
        response = await http.post(
            f"{a2a_system.agent_url}/a2a/jsonrpc",
            json={"jsonrpc": "2.0", "id": 1, "method": "agent/getAuthenticatedExtendedCard"},
        )
    card = response.json()["result"]
    assert card["name"] == "JidoCode: proj"
    assert "command:explain" in {s["id"] for s in card["skills"]}


async def test_the_sdk_discovers_anonymously_then_calls_with_the_token(a2a_system: A2ASystem) -> None:
    async with httpx.AsyncClient(timeout=TURN_S) as anonymous:
        public = await A2ACardResolver(anonymous, a2a_system.agent_url).get_agent_card()
    assert public.capabilities.extended_agent_card and [s.id for s in public.skills] == ["conversation"]
    async with a2a_system.http() as http:
        config = ClientConfig(streaming=False, httpx_client=http)
        client = ClientFactory(config).create(public)
        try:
            full = await client.get_extended_agent_card(GetExtendedAgentCardRequest())
            task = await _ask(client, "found you anonymously")
        finally:
            await client.close()
    assert "skill:review" in {s.id for s in full.skills}
    assert task.status.state == TaskState.TASK_STATE_COMPLETED
    assert get_artifact_text(task.artifacts[0]) == "You said: found you anonymously"
