"""The JSON API under ``/api``: one :class:`ApiRoute` per operation, answered through the
typed clients. The table also makes the OpenAPI document (:mod:`.openapi`).

Bodies are pydantic models (``extra="forbid"``): a body that is not JSON is
400, one that does not fit is 422 naming the field; service errors keep their
type (:mod:`.errors`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Literal, TypeVar, get_args

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, field_validator
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from jidocode.shared.cost import cost_text, total_cost
from jidocode.shared.errors import InvalidInput, JidoError
from jidocode.shared.events.assets import AssetItems, AssetType
from jidocode.shared.events.conversation import (
    ApprovalDecision,
    ApprovalResponse,
    Cancel,
    ConversationInfo,
    ConversationList,
    EventAccepted,
    Projection,
    Resume,
    RewindResult,
)
from jidocode.shared.events.engine import ProjectInfo, ProjectList
from jidocode.shared.events.llm import UsageTotals
from jidocode.shared.events.prd import LoopInfo, PrdList, PrdView
from jidocode.shared.events.tools import ToolCatalog
from jidocode.shared.forms import bounded_content
from jidocode.shared.rewind import RewindOutcome
from jidocode.shared.rewind import rewind as rewind_before

from .context import GatewayContext
from .errors import error_response, from_jido_error, from_validation_error

__all__ = [
    "API_ROUTES",
    "ApiRoute",
    "ApprovalBody",
    "CancelBody",
    "MessageBody",
    "RestoreBody",
    "RunPrdBody",
    "StartConversationBody",
    "StartProjectBody",
    "StopPrdBody",
    "UsageReport",
    "routes",
]

B = TypeVar("B", bound=BaseModel)


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class StartProjectBody(_Body):
    root: str = Field(min_length=1, max_length=4096, description="the project's root folder on the server")


class StartConversationBody(_Body):
    conversation_id: str | None = Field(default=None, min_length=1, max_length=128)


class MessageBody(_Body):
    text: str = Field(min_length=1, description="the user's message")


class CancelBody(_Body):
    reason: str | None = Field(default=None, max_length=1000)


class RewindBody(_Body):
    #: A user message of the conversation (its timeline entry id), or a turn's id.
    message_id: str = Field(min_length=1, max_length=512, description="the user message to go back before")


class RestoreBody(RewindBody):
    """What to restore from before a user message once its files' diff was shown and confirmed."""

    what: Literal["files", "both"] = Field(default="both", description="the files, or the conversation too")
    overwrite_user_changes: bool = Field(
        default=False, description="also restore the files somebody else than the agent changed since"
    )


class ApprovalBody(_Body):
    #: ``allow`` is ``approve_once``; ``approve_session`` also allows the same call for the session.
    decision: Literal["allow", "deny", "approve_once", "approve_session"]
    #: The values the question's form asks for (an MCP server's elicitation; an approve only),
    #: checked against the form by the tool runner before anything reaches the server.
    content: dict[str, Any] | None = None

    _bounded = field_validator("content")(bounded_content)


class RunPrdBody(_Body):
    """How to run a PRD's loop (every field optional: the PRD's and the project's defaults)."""

    provider: str = Field(default="", max_length=64, description="jidocode, codex, claude or gemini")
    model: str = Field(default="", max_length=200)
    worktree: bool = Field(default=False, description="work in .daedalus/worktrees/<name> on its own branch")
    branch: str = Field(default="", max_length=200)
    allow_dirty: bool = Field(default=False, description="start though the work tree has changes")


class StopPrdBody(_Body):
    reason: str = Field(default="", max_length=500, description="why (kept in the loop's record)")


_DECISIONS: dict[str, ApprovalDecision] = {
    "allow": "approve_once",
    "approve_once": "approve_once",
    "approve_session": "approve_session",
    "deny": "deny",
}
_ASSET_KINDS: TypeAdapter[AssetType] = TypeAdapter(AssetType)


class Accepted(BaseModel):
    """202 answer of an input sent to a conversation."""

    id: str = Field(description="the event id (every output it causes names it as causationid)")
    correlation_id: str
    sequence: int


class UsageReport(BaseModel):
    """A conversation's token usage and cost; the cost by the rule of :mod:`jidocode.shared.cost`."""

    project_id: str
    conversation_id: str
    calls: int
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int
    total_tokens: int
    cost_usd: float | None = Field(
        description="the total in dollars; null (unknown) when any call had no price"
    )
    priced_cost_usd: float = Field(description="the sum of the calls that had a price")
    unpriced_calls: int = Field(description="calls whose model's price litellm does not know")
    cost: str = Field(description="the total as shown: '$0.0123', or 'unknown (2 calls unpriced)'")
    model: str | None = Field(default=None, description="the last call's model")
    context_tokens: int = Field(default=0, description="what fills the model's context now")
    context_window: int = 0

    @classmethod
    def of(cls, totals: UsageTotals) -> UsageReport:
        return cls(
            **totals.model_dump(
                include={
                    "project_id",
                    "calls",
                    "prompt_tokens",
                    "completion_tokens",
                    "cached_tokens",
                    "total_tokens",
                    "unpriced_calls",
                    "model",
                    "context_tokens",
                    "context_window",
                }
            ),
            conversation_id=totals.conversation_id or "",
            cost_usd=total_cost(totals.cost_usd, totals.unpriced_calls),
            priced_cost_usd=totals.cost_usd,
            cost=cost_text(totals.cost_usd, totals.unpriced_calls),
        )


Handler = Callable[[Request, GatewayContext], Awaitable[Any]]


@dataclass(frozen=True)
class ApiRoute:
    """One API operation: its method and path, body and reply models, and handler."""

    method: str
    path: str
    handler: Handler
    summary: str
    response: type[BaseModel] | None = None
    body: type[BaseModel] | None = None
    status: int = 200
    query: tuple[str, ...] = ()


async def read_body(request: Request, model: type[B]) -> B:
    """The request body as ``model``; an empty body is ``{}``."""
    raw = await request.body()
    try:
        data = json.loads(raw) if raw.strip() else {}
    except ValueError:
        raise InvalidInput("the request body is not JSON") from None
    if not isinstance(data, dict):
        raise InvalidInput("the request body must be a JSON object")
    return model.model_validate(data)


def _pid(request: Request) -> str:
    return str(request.path_params["pid"])


def _cid(request: Request) -> str:
    return str(request.path_params["cid"])


# -- projects ---------------------------------------------------------------------


async def list_projects(request: Request, ctx: GatewayContext) -> ProjectList:
    return await ctx.engine().list_projects()


async def start_project(request: Request, ctx: GatewayContext) -> ProjectInfo:
    body = await read_body(request, StartProjectBody)
    return await ctx.engine().start_project(body.root)


async def stop_project(request: Request, ctx: GatewayContext) -> ProjectInfo:
    return await ctx.engine().stop_project(_pid(request))


async def list_tools(request: Request, ctx: GatewayContext) -> ToolCatalog:
    return await ctx.project(_pid(request)).list_tools()


async def list_assets(request: Request, ctx: GatewayContext) -> AssetItems:
    kind_arg = request.query_params.get("kind")
    kind: AssetType | None = None
    if kind_arg:
        try:
            kind = _ASSET_KINDS.validate_python(kind_arg)
        except ValidationError:
            raise InvalidInput(
                f"unknown asset kind {kind_arg!r}: expected one of {', '.join(get_args(AssetType))}",
                details={"kind": kind_arg},
            ) from None
    return await ctx.assets(_pid(request)).list(kind)


# -- conversations ----------------------------------------------------------------


async def list_conversations(request: Request, ctx: GatewayContext) -> ConversationList:
    raw = request.query_params.get("limit", "500")
    if not raw.isdigit() or not 1 <= int(raw) <= 500:
        raise InvalidInput(f"limit must be a whole number from 1 to 500, got {raw!r}", details={"limit": raw})
    return await ctx.conversations(_pid(request)).list(limit=int(raw))


async def start_conversation(request: Request, ctx: GatewayContext) -> ConversationInfo:
    body = await read_body(request, StartConversationBody)
    return await ctx.conversations(_pid(request)).start(body.conversation_id)


def _accepted(accepted: EventAccepted) -> Accepted:
    return Accepted(id=accepted.id, correlation_id=accepted.correlation_id, sequence=accepted.sequence)


async def send_message(request: Request, ctx: GatewayContext) -> Accepted:
    body = await read_body(request, MessageBody)
    return _accepted(await ctx.conversations(_pid(request)).send_message(_cid(request), body.text))


async def cancel(request: Request, ctx: GatewayContext) -> Accepted:
    body = await read_body(request, CancelBody)
    event = Cancel(reason=body.reason)
    return _accepted(
        await ctx.conversations(_pid(request)).send_event(_cid(request), event.type, event.to_data())
    )


async def resume(request: Request, ctx: GatewayContext) -> Accepted:
    event = Resume()
    return _accepted(
        await ctx.conversations(_pid(request)).send_event(_cid(request), event.type, event.to_data())
    )


async def rewind(request: Request, ctx: GatewayContext) -> RewindResult:
    """Rewind the conversation (not the files) to before a user message (docs/rewind.md)."""
    body = await read_body(request, RewindBody)
    return await ctx.conversations(_pid(request)).rewind(_cid(request), body.message_id)


async def rewind_preview(request: Request, ctx: GatewayContext) -> RewindOutcome:
    """What restoring the files from before a user message changes (its checkpoint's diff, the
    files changed since by somebody else named); nothing is done (docs/rewind.md)."""
    message_id = request.query_params.get("message_id", "")
    if not message_id:
        raise InvalidInput("message_id is required: the user message to go back before")
    outcome = await rewind_before(ctx.conversations(_pid(request)), _cid(request), message_id, "files")
    return outcome.model_copy(update={"done": False, "files": None})


async def rewind_restore(request: Request, ctx: GatewayContext) -> RewindOutcome:
    """Restore the files from before a user message (and rewind the conversation with ``both``):
    the confirmation of a diff shown; the files changed since by somebody else are kept unless
    ``overwrite_user_changes``."""
    body = await read_body(request, RestoreBody)
    return await rewind_before(
        ctx.conversations(_pid(request)),
        _cid(request),
        body.message_id,
        body.what,
        confirm=True,
        overwrite_user_changes=body.overwrite_user_changes,
    )


async def answer_approval(request: Request, ctx: GatewayContext) -> Accepted:
    body = await read_body(request, ApprovalBody)
    question = request.path_params.get("question_id")
    event = ApprovalResponse(
        request_id="/".join([str(request.path_params["request_id"]), *([str(question)] if question else [])]),
        decision=_DECISIONS[body.decision],
        content=body.content,
    )
    accepted = await ctx.conversations(_pid(request)).send_event(_cid(request), event.type, event.to_data())
    return _accepted(accepted)


async def get_projection(request: Request, ctx: GatewayContext) -> Projection:
    return await ctx.conversations(_pid(request)).get_projection(
        _cid(request), str(request.path_params["name"])
    )


async def get_usage(request: Request, ctx: GatewayContext) -> UsageReport:
    pid, cid = _pid(request), _cid(request)
    projection = await ctx.conversations(pid).get_projection(cid, "usage")
    value = dict(projection.value) if isinstance(projection.value, dict) else {}
    return UsageReport.of(UsageTotals.model_validate({**value, "project_id": pid, "conversation_id": cid}))


# -- PRD loops (seed 004) ------------------------------------------------------------


_PRD_NAME = re.compile(r"^[A-Za-z0-9_\-]{1,64}$")


def _prd(request: Request) -> str:
    """The PRD name in the path (checked here: a bad one is 400 naming it, not a body error)."""
    name = str(request.path_params["name"])
    if not _PRD_NAME.match(name):
        raise InvalidInput(
            f"invalid PRD name {name!r}: use 1 to 64 letters, digits, '_' or '-'", details={"name": name}
        )
    return name


async def list_prds(request: Request, ctx: GatewayContext) -> PrdList:
    return await ctx.prd(_pid(request)).list()


async def get_prd(request: Request, ctx: GatewayContext) -> PrdView:
    return await ctx.prd(_pid(request)).get(_prd(request))


async def run_prd(request: Request, ctx: GatewayContext) -> LoopInfo:
    body = await read_body(request, RunPrdBody)
    return await ctx.prd(_pid(request)).run(_prd(request), **body.model_dump())


async def pause_prd(request: Request, ctx: GatewayContext) -> LoopInfo:
    return await ctx.prd(_pid(request)).pause(_prd(request))


async def resume_prd(request: Request, ctx: GatewayContext) -> LoopInfo:
    return await ctx.prd(_pid(request)).resume(_prd(request))


async def stop_prd(request: Request, ctx: GatewayContext) -> LoopInfo:
    body = await read_body(request, StopPrdBody)
    return await ctx.prd(_pid(request)).stop(_prd(request), reason=body.reason)


_P = "/api/projects/{pid}"
_C = _P + "/conversations/{cid}"
_R = _P + "/prds/{name}"

API_ROUTES: tuple[ApiRoute, ...] = (
    ApiRoute("GET", "/api/projects", list_projects, "List the running projects", ProjectList),
    ApiRoute(
        "POST", "/api/projects", start_project, "Start (or find) a project", ProjectInfo, StartProjectBody
    ),
    ApiRoute("POST", _P + "/stop", stop_project, "Stop a project", ProjectInfo),
    ApiRoute("GET", _P + "/tools", list_tools, "The project's tool catalogue", ToolCatalog),
    ApiRoute("GET", _P + "/assets", list_assets, "The project's assets", AssetItems, query=("kind",)),
    ApiRoute(
        "GET",
        _P + "/conversations",
        list_conversations,
        "List conversations",
        ConversationList,
        query=("limit",),
    ),
    ApiRoute(
        "POST",
        _P + "/conversations",
        start_conversation,
        "Start or reopen a conversation",
        ConversationInfo,
        StartConversationBody,
    ),
    ApiRoute("POST", _C + "/messages", send_message, "Send a user message", Accepted, MessageBody, 202),
    ApiRoute("POST", _C + "/cancel", cancel, "Cancel the running turn", Accepted, CancelBody, 202),
    ApiRoute("POST", _C + "/resume", resume, "Resume a cancelled conversation", Accepted, None, 202),
    ApiRoute("POST", _C + "/rewind", rewind, "Rewind to before a user message", RewindResult, RewindBody),
    ApiRoute(
        "GET",
        _C + "/rewind/preview",
        rewind_preview,
        "What restoring the files from before a user message changes",
        RewindOutcome,
        query=("message_id",),
    ),
    ApiRoute(
        "POST",
        _C + "/rewind/restore",
        rewind_restore,
        "Restore the files (and the conversation) from before a user message",
        RewindOutcome,
        RestoreBody,
    ),
    ApiRoute(
        "POST",
        _C + "/approvals/{request_id}",
        answer_approval,
        "Answer a tool approval request",
        Accepted,
        ApprovalBody,
        202,
    ),
    ApiRoute(
        "POST",
        _C + "/approvals/{request_id}/{question_id:path}",
        answer_approval,
        "Answer a question a running call asks (<request id>/<question id>: an MCP server's"
        " elicitation, or the egress proxy's net/<host>:<port>)",
        Accepted,
        ApprovalBody,
        202,
    ),
    ApiRoute("GET", _C + "/projections/{name}", get_projection, "Read a projection", Projection),
    ApiRoute("GET", _C + "/usage", get_usage, "The conversation's token usage and cost", UsageReport),
    # PRD loops (seed 004): the events are the SSE route ``_R + "/events"`` (streams.py)
    ApiRoute("GET", _P + "/prds", list_prds, "List the project's PRDs", PrdList),
    ApiRoute("GET", _R, get_prd, "A PRD: its document (prd.json) and its loop", PrdView),
    ApiRoute("POST", _R + "/run", run_prd, "Start the PRD's loop", LoopInfo, RunPrdBody),
    ApiRoute("POST", _R + "/pause", pause_prd, "Pause the PRD's loop after its current step", LoopInfo),
    ApiRoute("POST", _R + "/resume", resume_prd, "Resume a paused PRD loop", LoopInfo),
    ApiRoute("POST", _R + "/stop", stop_prd, "Stop the PRD's loop", LoopInfo, StopPrdBody),
)


def _endpoint(spec: ApiRoute) -> Callable[[Request], Awaitable[Response]]:
    async def endpoint(request: Request) -> Response:
        ctx: GatewayContext = request.app.state.ctx
        try:
            result = await spec.handler(request, ctx)
        except JidoError as exc:
            return from_jido_error(exc)
        except ValidationError as exc:
            return from_validation_error(exc, "request body")
        except ValueError as exc:  # an id in the path that is not a valid subject token
            return error_response("invalid_input", str(exc))
        payload = result.model_dump(mode="json") if isinstance(result, BaseModel) else result
        return JSONResponse(payload, status_code=spec.status)

    endpoint.__name__ = spec.handler.__name__
    return endpoint


def routes() -> list[Route]:
    return [Route(spec.path, _endpoint(spec), methods=[spec.method]) for spec in API_ROUTES]
