"""One project as an MCP server, built once with the official SDK's low-level ``Server``.

::

    server = build_server(bus, project_id)
    await serve_stdio(server)            # jidocode mcp <dir>
    app = asgi_app(server)               # the HTTP gateway mounts it (see http.py)

What it serves (the SDK speaks the protocol; nothing here is protocol code):

* ``tools/list``: the project's policy-filtered catalogue (``ProjectClient.list_tools``),
  input and output schemas and safety annotations, plus ``chat`` and ``cancel``, and the PRD
  tools the policy lets through (``prd_list``, ``prd_status``, ``prd_run``, ``prd_pause``:
  ``prd_tools.py``), and the rewind tools it lets through (``checkpoints_list``,
  ``checkpoints_diff``, ``rewind``: ``rewind_tools.py``).
* ``tools/call``: ``ToolsClient.run``, the tool runner's one path with the policy, the
  sandbox and the quotas of any call; ``tool.*`` events on the bus as for any call. An
  ``ask`` becomes an elicitation when the client supports it (a server-to-client request
  on 2025 connections; an ``InputRequiredResult`` round on 2026-07-28 ones), otherwise
  the call fails with a message naming the rule that asked.
* ``resources/list``/``read``: the project's skills (``jidocode://skills/<name>``, also a
  template whose ``name`` completes); ``resources/subscribe`` to one tells of each reload of
  the project's assets (``subscriptions.py``).
* ``prompts/list``/``get``: its slash commands, rendered by the asset loader.
* ``completion/complete``: a command's path arguments, skill names (``completions.py``).
* ``logging/setLevel`` and log messages: a ``chat`` turn's conversation events at the
  client's level (``logs.py``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable
from contextlib import asynccontextmanager
from dataclasses import replace
from typing import Any, Final

import mcp_types as types
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.server.request_state import RequestStateBoundary, RequestStateSecurity
from mcp.shared.exceptions import MCPError
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from jidocode.client import ApprovalAnswer, ApprovalRequest
from jidocode.shared.bus import Bus
from jidocode.shared.clients import AssetsClient, PrdClient, ProjectClient, ToolsClient
from jidocode.shared.envelope import new_id
from jidocode.shared.errors import JidoError
from jidocode.shared.events.engine import ProjectInfo
from jidocode.shared.events.tools import ToolCallMeta, ToolResult
from jidocode.shared.subjects import validate_token

from .approvals import Approvals, Pending, TooManyPending
from .chat import (
    CANCEL_TOOL,
    CHAT_TOOL,
    CancelArgs,
    ChatArgs,
    ParkedTurn,
    ParkedTurns,
    TurnQuestions,
    parse_args,
    run_cancel,
    run_chat,
)
from .completions import SKILL_TEMPLATE, Completions
from .logs import LogLevels, TurnLog
from .mapping import (
    answer_to,
    command_prompt,
    error_result,
    question_form,
    result_to_mcp,
    skill_name,
    skill_resource,
    tool_to_mcp,
)
from .prd_tools import PRD_TOOL_NAMES, Asker, PrdTools, elicit_asker
from .rewind_tools import REWIND_TOOL_NAMES, RewindTools
from .subscriptions import SkillSubscriptions

__all__ = ["DEFAULT_CALL_TIMEOUT_S", "SERVER_NAME", "build_server"]

log = logging.getLogger("jidocode.mcp_gateway")

SERVER_NAME: Final = "jidocode"
#: Seconds a ``tools/call`` may take, a wait for approval included.
DEFAULT_CALL_TIMEOUT_S: Final = 300.0
#: Seconds a request to a service (catalogue, assets) may take.
REQUEST_TIMEOUT_S: Final = 15.0
#: The key of the approval question in an ``InputRequiredResult``.
APPROVE_KEY: Final = "approve"

Ctx = ServerRequestContext[Any]


def _can_elicit(ctx: Ctx) -> bool:
    """The client declared elicitation, and this request can carry the question: as an
    ``InputRequiredResult`` (2026-07-28) or a request to the client (a back channel)."""
    caps = ctx.session.client_capabilities
    if caps is None or caps.elicitation is None:
        return False
    return _modern(ctx) or ctx.session.can_send_request


def _modern(ctx: Ctx) -> bool:
    return ctx.protocol_version in MODERN_PROTOCOL_VERSIONS


def _back_channel_asker(ctx: Ctx) -> Asker | None:
    """Asks the user through an ``elicitation/create`` request, when the client declared
    elicitation and this connection can carry a request to it; else ``None``."""
    caps = ctx.session.client_capabilities
    if caps is None or caps.elicitation is None or not ctx.session.can_send_request:
        return None

    async def elicit(message: str, schema: dict[str, Any]) -> types.ElicitResult:
        return await ctx.session.elicit_form(message, schema, related_request_id=ctx.request_id)

    return elicit_asker(elicit)


class _ProjectMcp:
    """The handlers of one project's server and what they share."""

    def __init__(self, bus: Bus, project_id: str, *, call_timeout_s: float) -> None:
        self.bus = bus
        self.project_id = project_id
        self.call_timeout_s = call_timeout_s
        self.project = ProjectClient(bus, project_id, timeout=REQUEST_TIMEOUT_S)
        self.assets = AssetsClient(bus, project_id, timeout=REQUEST_TIMEOUT_S)
        self.tools = ToolsClient(bus, project_id, timeout=call_timeout_s)
        self.approvals = Approvals(bus, project_id)
        self.turns = ParkedTurns()
        self.completions = Completions(self.assets, self.tools)
        self.log_levels = LogLevels()
        self.subscriptions = SkillSubscriptions(bus, project_id, self.assets)
        self.prd_tools = PrdTools(PrdClient(bus, project_id, timeout=REQUEST_TIMEOUT_S), self.project)
        self.rewind_tools = RewindTools(bus, project_id, self.prd_tools)
        self._info: ProjectInfo | None = None
        self._stopping: set[asyncio.Future[None]] = set()

    async def info(self) -> ProjectInfo:
        if self._info is None:
            self._info = await self.project.info()
        return self._info

    # -- tools ------------------------------------------------------------------------

    async def list_tools(
        self, ctx: Ctx, params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        catalog = await self.project.list_tools()
        own = {CHAT_TOOL.name, CANCEL_TOOL.name, *PRD_TOOL_NAMES, *REWIND_TOOL_NAMES}
        shadowed = [t.name for t in catalog.tools if t.name in own]
        if shadowed:
            log.warning(
                "the project's tools %s are not listed: the MCP server's own tools have those names", shadowed
            )
        tools = [tool_to_mcp(spec) for spec in catalog.tools if spec.name not in own]
        prd_tools = await self.prd_tools.exposed()
        rewind_tools = await self.rewind_tools.exposed()
        return types.ListToolsResult(tools=[*tools, CHAT_TOOL, CANCEL_TOOL, *prd_tools, *rewind_tools])

    async def call_tool(
        self, ctx: Ctx, params: types.CallToolRequestParams
    ) -> types.CallToolResult | types.InputRequiredResult:
        if params.name == CHAT_TOOL.name:
            return await self._chat(ctx, params)
        if params.name in PRD_TOOL_NAMES:
            return await self.prd_tools.call(params.name, params.arguments, _back_channel_asker(ctx))
        if params.name in REWIND_TOOL_NAMES:
            return await self.rewind_tools.call(params.name, params.arguments, _back_channel_asker(ctx))
        if params.name == CANCEL_TOOL.name:
            cancel = parse_args(CancelArgs, params.name, params.arguments)
            return (
                cancel
                if isinstance(cancel, types.CallToolResult)
                else await run_cancel(self.bus, self.project_id, cancel)
            )
        try:
            if params.request_state is not None:
                return await self._resume(ctx, params)
            args = dict(params.arguments or {})
            if not _can_elicit(ctx):
                return result_to_mcp(params.name, await self._run(params.name, args))
            return await self._run_asking(ctx, params.name, args)
        except JidoError as exc:  # the runner could not take the call at all (nobody serving, timeout …)
            return error_result(f"{params.name} failed ({exc.type}): {exc.message}", error=exc.type)

    async def _run(self, name: str, args: dict[str, Any]) -> ToolResult:
        """A call with no conversation (a client that cannot be asked), as ``jidocode tools run``."""
        request_id = f"mcp-{new_id()}"
        meta = ToolCallMeta(request_id=request_id)
        try:
            return await self.tools.run(name, args, meta=meta, timeout=self.call_timeout_s)
        except asyncio.CancelledError:  # the client cancelled its request: stop the call too
            self._stop(request_id, None)
            raise

    def _stop(self, request_id: str, conversation_id: str | None) -> None:
        """Cancel call ``request_id`` on the tool runner, in the background (the caller is
        being cancelled: it cannot await anything more)."""

        async def cancel() -> None:
            await self.tools.cancel(request_id, conversation_id=conversation_id, timeout=REQUEST_TIMEOUT_S)

        self._background(cancel(), f"cancel tool call {request_id}")

    def _cancel_turn(self, conversation_id: str) -> None:
        """Cancel the running turn of ``conversation_id``, in the background."""
        self._background(
            run_cancel(
                self.bus,
                self.project_id,
                CancelArgs(conversation_id=conversation_id, reason="mcp request cancelled"),
            ),
            f"cancel the turn of {conversation_id}",
        )

    def _background(self, work: Awaitable[Any], what: str) -> None:
        async def run() -> None:
            try:
                await work
            except JidoError as exc:
                log.warning("could not %s: %s", what, exc)

        task = asyncio.ensure_future(run())
        self._stopping.add(task)
        task.add_done_callback(self._stopping.discard)

    async def _run_asking(
        self, ctx: Ctx, name: str, args: dict[str, Any]
    ) -> types.CallToolResult | types.InputRequiredResult:
        """Run in the approvals conversation; each question the call asks goes to the client."""
        conversation_id = await self.approvals.conversation_id()
        request_id = f"mcp-{new_id()}"
        questions = self.approvals.expect(request_id)
        meta = ToolCallMeta(request_id=request_id, conversation_id=conversation_id)
        run = asyncio.ensure_future(self.tools.run(name, args, meta=meta, timeout=self.call_timeout_s))
        call = Pending(request_id, name, args, run, None, conversation_id, questions)
        outcome: types.CallToolResult | types.InputRequiredResult | None = None
        try:
            outcome = await self._until_done(ctx, call)
            return outcome
        except TooManyPending as exc:
            return error_result(str(exc), error="quota_exceeded")
        finally:
            if not isinstance(outcome, types.InputRequiredResult):  # not parked for a later round
                self.approvals.forget(request_id)
                if not run.done():  # the client cancelled its request, or the elicitation failed
                    run.cancel()
                    self._stop(request_id, conversation_id)

    async def _until_done(self, ctx: Ctx, call: Pending) -> types.CallToolResult | types.InputRequiredResult:
        """The call's result; each question it asks before (the policy's ask, its MCP server's
        forms) goes to the client: as an elicitation request on a 2025 connection, or as an
        ``InputRequiredResult`` on a 2026-07-28 one (the call parked until the round that answers)."""
        while True:
            asked = asyncio.ensure_future(call.questions.get())
            try:
                await asyncio.wait({call.run, asked}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                if not asked.done():
                    asked.cancel()
            if call.run.done():
                return result_to_mcp(call.tool, call.run.result())
            question = asked.result()
            if _modern(ctx):
                token = self.approvals.park(replace(call, question=question))
                return types.InputRequiredResult(
                    input_requests={APPROVE_KEY: _ask(question)}, request_state=token
                )
            message, schema = question_form(question)
            answer = await ctx.session.elicit_form(message, schema, related_request_id=ctx.request_id)
            self.approvals.answer(question.request_id, answer_to(question, answer))

    async def _resume(
        self, ctx: Ctx, params: types.CallToolRequestParams
    ) -> types.CallToolResult | types.InputRequiredResult:
        """The round that carries the answer to a parked call's question."""
        assert params.request_state is not None
        pending = self.approvals.take(params.request_state)
        if pending is None:
            return error_result(
                f"{params.name}: the call waiting for this approval is over (answered, timed out or "
                "cancelled); call the tool again",
                error="not_found",
            )
        if pending.tool != params.name or pending.args != dict(params.arguments or {}):
            pending.run.cancel()
            self._stop(pending.request_id, pending.conversation_id)
            return error_result(
                f"the approval round names {params.name} with other arguments than the call it answers "
                f"({pending.tool}); the call was cancelled",
                error="invalid_input",
            )
        question = pending.question
        assert question is not None  # parked on a question
        self.approvals.answer(
            question.request_id, answer_to(question, (params.input_responses or {}).get(APPROVE_KEY))
        )
        try:
            return await self._until_done(ctx, pending)
        except TooManyPending as exc:
            pending.run.cancel()
            self._stop(pending.request_id, pending.conversation_id)
            return error_result(str(exc), error="quota_exceeded")
        except asyncio.CancelledError:  # the client cancelled this round: stop the call too
            pending.run.cancel()
            self._stop(pending.request_id, pending.conversation_id)
            raise

    async def _chat(
        self, ctx: Ctx, params: types.CallToolRequestParams
    ) -> types.CallToolResult | types.InputRequiredResult:
        async def progress(count: float, text: str) -> None:
            await ctx.session.report_progress(count, None, text)

        if params.request_state is not None:  # a round answering a turn's ask (2026-07-28)
            parked = self.turns.take(params.request_state)
            if parked is None:
                return error_result(
                    "chat: the turn waiting for this approval is over (answered, timed out or cancelled)",
                    error="not_found",
                )
            if not parked.answer.done():
                response = (params.input_responses or {}).get(APPROVE_KEY)
                parked.answer.set_result(answer_to(parked.question, response))
            parked.turn.sink = progress
            parked.turn.log.follow(ctx)
            return await self._follow_turn(parked.task, parked.turn)

        args = parse_args(ChatArgs, params.name, params.arguments)
        if isinstance(args, types.CallToolResult):
            return args
        try:
            project = await self.info()
        except JidoError as exc:
            return error_result(f"chat failed ({exc.type}): {exc.message}", error=exc.type)

        turn_log = TurnLog(self.log_levels)
        turn_log.follow(ctx)
        if _can_elicit(ctx) and _modern(ctx):  # asks travel as rounds of this request
            turn = TurnQuestions(turn_log)
            turn.sink = progress
            task = asyncio.ensure_future(
                run_chat(
                    self.bus,
                    project,
                    args,
                    progress=turn.progress,
                    approve=turn.approve,
                    on_abandon=self._cancel_turn,
                    on_event=turn_log.on_event,
                )
            )
            return await self._follow_turn(task, turn)

        approve = None
        if _can_elicit(ctx):  # asks travel as requests to the client (2025 connections)

            async def approve(request: ApprovalRequest) -> ApprovalAnswer:
                message, schema = question_form(request)
                answer = await ctx.session.elicit_form(message, schema, related_request_id=ctx.request_id)
                return answer_to(request, answer)

        return await run_chat(
            self.bus,
            project,
            args,
            progress=progress,
            approve=approve,
            on_abandon=self._cancel_turn,
            on_event=turn_log.on_event,
        )

    async def _follow_turn(
        self, task: asyncio.Task[types.CallToolResult], turn: TurnQuestions
    ) -> types.CallToolResult | types.InputRequiredResult:
        """Wait for the turn's result, or its next ask (returned as a round for the client)."""
        asked = asyncio.ensure_future(turn.questions.get())
        try:
            first: set[asyncio.Future[Any]] = {task, asked}
            await asyncio.wait(first, return_when=asyncio.FIRST_COMPLETED)
            if task.done():
                return task.result()
            question, answer = asked.result()
            turn.sink = None  # this round ends here: nowhere to send progress or logs until the next
            turn.log.follow(None)
            try:
                token = self.turns.park(ParkedTurn(task, turn, question, answer))
            except TooManyPending as exc:
                answer.set_result("deny")
                return error_result(str(exc), error="quota_exceeded")
            return types.InputRequiredResult(
                input_requests={APPROVE_KEY: _ask(question)}, request_state=token
            )
        except asyncio.CancelledError:  # the client cancelled its request: run_chat cancels the turn
            task.cancel()
            raise
        finally:
            if not asked.done():
                asked.cancel()

    # -- skills and slash commands ---------------------------------------------------------

    async def list_resources(
        self, ctx: Ctx, params: types.PaginatedRequestParams | None
    ) -> types.ListResourcesResult:
        items = await self.assets.list("skill")
        return types.ListResourcesResult(resources=[skill_resource(item) for item in items.items])

    async def list_resource_templates(
        self, ctx: Ctx, params: types.PaginatedRequestParams | None
    ) -> types.ListResourceTemplatesResult:
        template = types.ResourceTemplate(
            name="skill",
            uri_template=SKILL_TEMPLATE,
            description="A skill of the project by name (its markdown body); the name completes",
            mime_type="text/markdown",
        )
        return types.ListResourceTemplatesResult(resource_templates=[template])

    async def read_resource(
        self, ctx: Ctx, params: types.ReadResourceRequestParams
    ) -> types.ReadResourceResult:
        name = skill_name(str(params.uri))
        if name is None:
            raise MCPError(
                types.INVALID_PARAMS,
                f"unknown resource {params.uri!r}: this server has jidocode://skills/<name> only",
            )
        try:
            doc = await self.assets.get("skill", name)
        except JidoError as exc:
            raise MCPError(types.INVALID_PARAMS, f"skill {name!r}: {exc.message}") from None
        return types.ReadResourceResult(
            contents=[
                types.TextResourceContents(
                    uri=str(params.uri), mime_type="text/markdown", text=str(doc.asset.get("body") or "")
                )
            ]
        )

    async def list_prompts(
        self, ctx: Ctx, params: types.PaginatedRequestParams | None
    ) -> types.ListPromptsResult:
        items = await self.assets.list("command")
        docs = await asyncio.gather(*(self.assets.get("command", str(i["name"])) for i in items.items))
        return types.ListPromptsResult(prompts=[command_prompt(doc.asset) for doc in docs])

    async def get_prompt(self, ctx: Ctx, params: types.GetPromptRequestParams) -> types.GetPromptResult:
        arguments: dict[str, str] = dict(params.arguments or {})
        rendered: str | dict[str, str] = (
            arguments.pop("arguments", "") if list(arguments) == ["arguments"] else arguments
        )
        result = await self.assets.render_command(params.name, rendered or None, timeout=REQUEST_TIMEOUT_S)
        if not result.ok or not isinstance(result.data, dict):
            error = result.error
            raise MCPError(
                types.INVALID_PARAMS,
                f"/{params.name} did not render: {error.message if error else 'no prompt'}",
            )
        return types.GetPromptResult(
            description=f"/{params.name}",
            messages=[
                types.PromptMessage(
                    role="user", content=types.TextContent(text=str(result.data.get("prompt", "")))
                )
            ],
        )

    async def close(self) -> None:
        self.turns.close()
        await self.subscriptions.close()
        await self.approvals.close()


def _ask(question: ApprovalRequest) -> types.ElicitRequest:
    message, schema = question_form(question)
    return types.ElicitRequest(params=types.ElicitRequestFormParams(message=message, requested_schema=schema))


def build_server(bus: Bus, project_id: str, *, call_timeout_s: float = DEFAULT_CALL_TIMEOUT_S) -> Server[Any]:
    """The MCP server of project ``project_id`` on ``bus`` (the SDK's low-level ``Server``).

    Serve it over stdio (:func:`~jidocode.services.mcp_gateway.serve_stdio`) or streamable
    HTTP (:func:`~jidocode.services.mcp_gateway.asgi_app`); the same object serves both.
    ``call_timeout_s`` bounds a ``tools/call``, a wait for approval included.
    """
    validate_token(project_id, "project id")
    if not 0 < call_timeout_s <= 3600:
        raise ValueError(f"call_timeout_s must be in (0, 3600], got {call_timeout_s}")
    state = _ProjectMcp(bus, project_id, call_timeout_s=call_timeout_s)

    @asynccontextmanager
    async def lifespan(_: Server[Any]) -> AsyncIterator[dict[str, Any]]:
        try:
            yield {}
        finally:
            await state.close()

    server: Server[Any] = Server(
        SERVER_NAME,
        version="1",
        title=f"JidoCode project {project_id}",
        instructions=(
            "The tools of one JidoCode project, run under its policy and sandbox; `chat` talks to "
            "the project's assistant, `cancel` stops a turn, `prd_*` list, follow, start and pause its PRD "
            "loops, `rewind` goes back before a message (files, conversation or both; `confirm` does it). "
            "Skills are resources, slash commands prompts."
        ),
        lifespan=lifespan,
        on_list_tools=state.list_tools,
        on_call_tool=state.call_tool,
        on_list_resources=state.list_resources,
        on_list_resource_templates=state.list_resource_templates,
        on_subscribe_resource=state.subscriptions.subscribe,
        on_unsubscribe_resource=state.subscriptions.unsubscribe,
        on_read_resource=state.read_resource,
        on_list_prompts=state.list_prompts,
        on_get_prompt=state.get_prompt,
        on_completion=state.completions.complete,
    )
    # logging/setLevel (2025 connections) by hand: the constructor's on_set_logging_level warns that
    # 2026-07-28 replaced it with a per-request opt-in, which TurnLog honours as well.
    server.add_request_handler("logging/setLevel", types.SetLevelRequestParams, state.log_levels.set_level)
    # request_state tokens are sealed and bound to their call, as MCPServer does by default.
    server.middleware.append(
        RequestStateBoundary(RequestStateSecurity.ephemeral(), default_audience=SERVER_NAME)
    )
    return server
