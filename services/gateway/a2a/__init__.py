"""A2A on the gateway: every project is an agent, every task a conversation (``docs/a2a.md``).

Routes (all behind the gateway's token, like every route but ``/healthz``, except the public
card, decision 0342):

=====================================================  =====================================
``GET  /projects/<p>/.well-known/agent-card.json``     the project's public agent card, no token
                                                       (:mod:`.card`; also under
                                                       ``/projects/<p>/a2a``)
``POST /projects/<p>/a2a/jsonrpc``                     the JSON-RPC binding (the SDK's dispatcher;
                                                       also at ``/projects/<p>``)
``/projects/<p>/a2a/rest/…``                           the HTTP+JSON binding (the SDK's REST routes)
=====================================================  =====================================

The full card (the project, its skills and tools) is the authenticated extended card:
``GetExtendedAgentCard`` (JSON-RPC), ``GET …/rest/extendedAgentCard`` and their v0.3 forms.

Protocol work is the ``a2a-sdk``'s (``DefaultRequestHandler`` and its route
factories); ours is :class:`.executor.ConversationExecutor` and
:class:`.tasks.ConversationTaskStore` over the typed clients, one pair per project.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncGenerator, Awaitable, Callable
from typing import TYPE_CHECKING, Any, Final
from urllib.parse import parse_qs

from a2a.server.agent_execution import SimpleRequestContextBuilder
from a2a.server.agent_execution.active_task import TERMINAL_TASK_STATES
from a2a.server.agent_execution.context import RequestContext
from a2a.server.context import ServerCallContext
from a2a.server.events import Event
from a2a.server.request_handlers import DefaultRequestHandler, validate_request_params
from a2a.server.request_handlers.response_helpers import agent_card_to_dict, build_error_response
from a2a.server.routes import create_jsonrpc_routes, create_rest_routes
from a2a.server.routes.common import DefaultServerCallContextBuilder
from a2a.types.a2a_pb2 import AgentCard, SendMessageRequest, SubscribeToTaskRequest, Task, TaskState
from a2a.utils.constants import VERSION_HEADER
from a2a.utils.error_handlers import build_rest_error_payload
from a2a.utils.errors import InvalidParamsError, TaskNotFoundError, UnsupportedOperationError
from google.protobuf.json_format import MessageToDict
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Mount, Route, Router
from starlette.types import Receive, Scope, Send

from jidocode.shared import subjects
from jidocode.shared.envelope import new_id
from jidocode.shared.errors import JidoError, NotFound
from jidocode.shared.events.engine import ProjectInfo
from jidocode.shared.events.tools import ToolSpec

from .card import JSONRPC_PATH, REST_PATH, build_card, build_public_card
from .executor import ConversationExecutor
from .listing import status_refusal, unknown_status
from .tasks import ConversationTaskStore

if TYPE_CHECKING:
    from jidocode.services.gateway.context import GatewayContext

__all__ = ["ProjectAgents", "routes"]

log = logging.getLogger("jidocode.gateway.a2a")

#: Where a card is, below an agent's base URL.
CARD_PATH: Final = "/.well-known/agent-card.json"

#: Seconds a task parked in ``input-required`` keeps its in-memory SDK state on this replica;
#: after that a follow-up rebuilds it from the conversation (as on any other replica).
PARKED_TASK_S: Final = 300.0

_STATUS: Final = {"not_found": 404, "invalid_input": 400, "conflict": 409}

#: Where :class:`_BaseUrlContext` leaves the request's base URL in the SDK's call context.
_BASE_URL: Final = "jidocode_base_url"

#: Builds a project's extended card for the gateway's base URL (the one the request came to).
ExtendedCard = Callable[[str], Awaitable[AgentCard]]


def _error(status: int, error_type: str, message: str) -> Response:
    return JSONResponse(
        {"error": {"type": error_type, "message": message, "details": {}}}, status_code=status
    )


def _card_json(card: AgentCard, asked_version: str) -> dict[str, Any]:
    """The card as the client's protocol version reads it: a v1.x client (``A2A-Version``
    ``1.…``, as the SDKs' 1.x clients send) gets the v1.0 card alone; any other (v0.3 clients
    send no version) the SDK's card with the v0.3 fields added to the same object."""
    if asked_version.strip().split(".")[0] == "1":
        v1: dict[str, Any] = MessageToDict(card)
        return v1
    return agent_card_to_dict(card)


async def _refused_status(request: Request) -> Response | None:
    """The ``InvalidParams`` answer to a ``ListTasks`` whose ``status`` is no task state; ``None``
    for any other request (a body that is no JSON is left to the SDK, which says so)."""
    try:
        body = await request.json()  # Starlette keeps it: the SDK reads the same body again
    except ValueError:
        return None
    unknown = unknown_status(body)
    if unknown is None:
        return None
    request_id, message = unknown
    return JSONResponse(build_error_response(request_id, InvalidParamsError(message=message)))


def _refused_rest_status(scope: Scope) -> Response | None:
    """The 400 answer to a ``GET …/rest/tasks`` whose ``status`` is no task state, else ``None``."""
    if scope["method"] != "GET" or not scope["path"].rstrip("/").endswith(REST_PATH + "/tasks"):
        return None
    for value in parse_qs(scope["query_string"].decode("latin-1")).get("status", []):
        refusal = status_refusal(value)
        if refusal is not None:
            return JSONResponse(
                build_rest_error_payload(InvalidParamsError(message=refusal)), status_code=400
            )
    return None


class _BaseUrlContext(DefaultServerCallContextBuilder):
    """The SDK's call context, plus the gateway's base URL as the request saw it (the extended
    card's endpoint URLs are built from it, as the public card's are)."""

    def build(self, request: Request) -> ServerCallContext:
        context = super().build(request)
        context.state[_BASE_URL] = str(request.base_url)
        return context


class _ConversationIds(SimpleRequestContextBuilder):
    """One id for task, context and conversation: the client's task id, else its context id,
    else a new one; it must be a bus token (it becomes part of subjects)."""

    async def build(
        self,
        context: ServerCallContext,
        params: SendMessageRequest | None = None,
        task_id: str | None = None,
        context_id: str | None = None,
        task: Task | None = None,
    ) -> RequestContext:
        if params is not None:
            task_id = task_id or context_id or new_id().lower()
            if context_id and context_id != task_id:
                raise InvalidParamsError(
                    message=f"context {context_id!r} is not task {task_id!r}'s: a task's context id is its own id"
                )
            context_id = task_id
            try:
                subjects.validate_token(task_id, "task id")
            except ValueError as exc:
                raise InvalidParamsError(message=str(exc)) from None
        return await super().build(context, params, task_id, context_id, task)


class _Handler(DefaultRequestHandler):
    """The SDK's handler; ``SubscribeToTask`` also follows a turn that another replica runs.

    The SDK taps its in-memory run of the task; without one here (the turn runs on another
    replica, or this one released it) the subscriber gets the task as the conversation shows
    it, then the rest of the turn from the conversation's output.
    """

    def __init__(self, executor: ConversationExecutor, **kw: Any) -> None:
        super().__init__(agent_executor=executor, **kw)
        self._tail = executor.tail

    @validate_request_params
    async def on_subscribe_to_task(
        self, params: SubscribeToTaskRequest, context: ServerCallContext
    ) -> AsyncGenerator[Event, None]:
        if await self._active_task_registry.get(params.id) is not None:
            async for event in super().on_subscribe_to_task(params, context):
                yield event
            return
        stored = await self._versioned_store.get(params.id, context)
        if stored is None:
            raise TaskNotFoundError
        task = stored.task
        if task.status.state in TERMINAL_TASK_STATES:
            raise UnsupportedOperationError(
                message=f"Task {params.id} is in terminal state: {TaskState.Name(task.status.state)}"
            )
        yield task
        async for update in self._tail(params.id):
            yield update


class _Agent:
    """The SDK's request handler and bindings for one project."""

    def __init__(self, ctx: GatewayContext, project_id: str, extended: ExtendedCard) -> None:
        conversations = ctx.conversations(project_id)

        async def extended_card(_placeholder: AgentCard, context: ServerCallContext) -> AgentCard:
            return await extended(str(context.state[_BASE_URL]))

        # the SDK checks calls against the public card's capabilities (the same as the extended
        # card's) and wants some extended card before it calls the modifier that builds the real one
        public = build_public_card("http://127.0.0.1", project_id)
        self.handler = _Handler(
            ConversationExecutor(ctx.bus, conversations),
            task_store=ConversationTaskStore(conversations),
            agent_card=public,
            extended_agent_card=public,
            extended_card_modifier=extended_card,
            request_context_builder=_ConversationIds(),
            interrupted_task_timeout=PARKED_TASK_S,
        )
        calls = _BaseUrlContext()
        (jsonrpc,) = create_jsonrpc_routes(
            self.handler, rpc_url="/", enable_v0_3_compat=True, context_builder=calls
        )
        self.jsonrpc = jsonrpc
        self.rest = Router(
            routes=create_rest_routes(self.handler, enable_v0_3_compat=True, context_builder=calls)
        )


class ProjectAgents:
    """The routes' state: one :class:`_Agent` per project asked for (built on first use).

    The agents hold only what the SDK keeps while a request runs; a task's state is its
    conversation's, so any replica serves any task.
    """

    def __init__(self, ctx: GatewayContext) -> None:
        self.ctx = ctx
        self._agents: dict[str, _Agent] = {}

    async def project(self, project_id: str) -> ProjectInfo | Response:
        """The running project, or the error response to send."""
        try:
            subjects.validate_token(project_id, "project id")
        except ValueError:
            return _error(404, "not_found", "no such project")
        try:
            info = await self.ctx.project(project_id).info()
        except NotFound:
            return _error(404, "not_found", f"no project {project_id}")
        except JidoError as exc:
            return _error(_STATUS.get(exc.type, 503), exc.type, exc.message)
        if info.status != "running":
            return _error(409, "conflict", f"project {project_id} is stopped: start it again first")
        return info

    async def _public_project(self, request: Request) -> ProjectInfo | Response:
        """:meth:`project` for a card request: without the token, every project that does not
        answer is the same 404 (an anonymous caller learns no project's state)."""
        info = await self.project(request.path_params["project_id"])
        if isinstance(info, Response) and not self.ctx.auth.allows(request):
            return _error(404, "not_found", "no running agent at this URL")
        return info

    async def agent(self, project_id: str) -> _Agent | Response:
        info = await self.project(project_id)
        if isinstance(info, Response):
            return info
        agent = self._agents.get(project_id)
        if agent is None:
            agent = self._agents[project_id] = _Agent(
                self.ctx, project_id, lambda base_url: self.extended_card(project_id, base_url)
            )
        return agent

    async def card(self, request: Request) -> Response:
        """The public card, token or not (decision 0342); the full one is the extended card."""
        info = await self._public_project(request)
        if isinstance(info, Response):
            return info
        card = build_public_card(str(request.base_url), info.project_id)
        # A2A: the version is a header, or a query parameter of the same name
        asked = request.headers.get(VERSION_HEADER) or request.query_params.get(VERSION_HEADER, "")
        return JSONResponse(_card_json(card, asked))

    async def extended_card(self, project_id: str, base_url: str) -> AgentCard:
        """The full card of a project (``GetExtendedAgentCard``, only with the token): the project,
        its skills, commands, workflows and tools."""
        info = await self.project(project_id)
        if isinstance(info, Response):  # stopped since the request was routed to its agent
            raise UnsupportedOperationError(message=f"project {project_id} is not running")
        assets, tools = await asyncio.gather(self._assets(project_id), self._tools(project_id))
        return build_card(info, base_url, assets, tools)

    async def _assets(self, project_id: str) -> list[dict[str, Any]]:
        """The project's skills, commands and workflows; none while the loader cannot say (the
        card still says what the agent does; they come back with the loader)."""
        try:
            return (await self.ctx.assets(project_id).list()).items
        except JidoError as exc:
            log.warning("agent card of %s without its skills: %s", project_id, exc.message)
            return []

    async def _tools(self, project_id: str) -> list[ToolSpec]:
        """The tools the project's policy shows the model; none while the project cannot say."""
        try:
            return (await self.ctx.project(project_id).list_tools()).tools
        except JidoError as exc:
            log.warning("agent card of %s without its tools: %s", project_id, exc.message)
            return []

    async def jsonrpc(self, request: Request) -> Response:
        agent = await self.agent(request.path_params["project_id"])
        if isinstance(agent, Response):
            return agent
        refused = await _refused_status(request)
        if refused is not None:
            return refused
        response: Response = await agent.jsonrpc.endpoint(request)  # type: ignore[attr-defined]
        return response

    async def rest(self, scope: Scope, receive: Receive, send: Send) -> None:
        agent = await self.agent(scope["path_params"]["project_id"])
        if isinstance(agent, Response):
            await agent(scope, receive, send)
            return
        refused = _refused_rest_status(scope)
        if refused is not None:
            await refused(scope, receive, send)
            return
        await agent.rest(scope, receive, send)


async def _no_project_in_url(request: Request) -> Response:
    """The 404 of ``/projects/.well-known/agent-card.json`` and of the gateway's own
    ``/.well-known/agent-card.json`` (each project is its own agent), saying which base URL to give."""
    base = str(request.base_url).rstrip("/")
    return _error(
        404,
        "not_found",
        f"no project in this URL: give the agent's base URL with its trailing slash, "
        f"{base}/projects/<project id>/ (or {base}/projects/<project id>/a2a)",
    )


def routes(ctx: GatewayContext) -> list[BaseRoute]:
    """The A2A routes, mounted by :func:`jidocode.services.gateway.app.create_app`."""
    agents = ProjectAgents(ctx)
    # the card under the base URL ".../projects/<p>/" or ".../projects/<p>/a2a", given with or
    # without its trailing slash (a client joining "<base>/" and "/.well-known/…" asks for
    # "//.well-known/…"; the JS SDK resolves ".well-known/…" against the base, so without the
    # slash it asks one level up: ".../projects/<p>/a2a" then finds ".../projects/<p>/.well-known")
    cards = [
        Route(f"/projects/{{project_id}}{under}{slash}{CARD_PATH}", agents.card, methods=["GET"])
        for under in ("", "/a2a")
        for slash in ("", "/")
    ]
    # a JS client given ".../projects/<p>" without its slash asks here, a client given the
    # gateway's own URL at its root: say what to give instead
    cards.extend(Route(root + CARD_PATH, _no_project_in_url, methods=["GET"]) for root in ("/projects", ""))
    # JSON-RPC at its own path, and at the agent's base URL for clients that post there
    jsonrpc = [
        Route(f"/projects/{{project_id}}{path}", agents.jsonrpc, methods=["POST"])
        for path in (JSONRPC_PATH, JSONRPC_PATH + "/", "", "/")
    ]
    return [
        *cards,
        *jsonrpc,
        Mount("/projects/{project_id}" + REST_PATH, app=agents.rest),
    ]
