"""The console's pages: server-rendered frames over the typed clients.

A page renders what a listing gives (projects, conversations, tools) and the frame the
page's script fills live from the gateway's JSON API and SSE routes. Templates autoescape
everything; the scripts put bus data into the page as text only. Every page is sent with a
Content-Security-Policy that allows scripts, styles and connections from this origin only,
so even a slip in escaping could not run a script that came with an event.
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final

import jinja2
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response

from jidocode.services.gateway.context import GatewayContext
from jidocode.shared.errors import (
    Conflict,
    InvalidInput,
    JidoError,
    NotFound,
    PayloadTooLarge,
    PermissionDenied,
    RequestTimeout,
    ServiceUnavailable,
)
from jidocode.shared.events import ERROR_TYPE, EVENT_TYPES
from jidocode.shared.events.prd import PRD_EVENTS
from jidocode.shared.subjects import validate_token

__all__ = ["BASE", "SECURITY_HEADERS", "STATIC", "STATIC_DIR", "Pages", "status_of", "when"]

#: Where the console's pages live (``/`` is the projects page).
BASE: Final = "/console"
STATIC: Final = f"{BASE}/static"
STATIC_DIR: Final = Path(__file__).parent / "static"
_TEMPLATES: Final = Path(__file__).parent / "templates"

#: Sent with every page: nothing but this origin's own files may run or load.
SECURITY_HEADERS: Final = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self'; "
        "base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    # same-origin, not no-referrer: under no-referrer the Fetch standard has a browser send
    # ``Origin: null`` on the console's own POSTs, which the gateway's same-origin check
    # refuses (decision 0305); same-origin still sends nothing to another origin
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}

#: The HTTP status of a page whose request failed with one of these errors.
_STATUS: Final[tuple[tuple[type[JidoError], int], ...]] = (
    (InvalidInput, 400),
    (PermissionDenied, 403),
    (NotFound, 404),
    (Conflict, 409),
    (PayloadTooLarge, 413),
    (ServiceUnavailable, 503),
    (RequestTimeout, 503),
)

#: Every CloudEvent type a bus view listens for (an SSE listener is per type).
_BUS_TYPES: Final = json.dumps(sorted(EVENT_TYPES | {ERROR_TYPE}))

#: Every PRD loop event type (the PRD page's SSE listeners).
_PRD_TYPES: Final = json.dumps(sorted(str(m.model_fields["type"].default) for m in PRD_EVENTS))
_PRD_NAME: Final = re.compile(r"^[A-Za-z0-9_\-]{1,64}$")

#: The most conversations a project's page lists (the newest).
MAX_CONVERSATIONS: Final = 200
#: The longest filter value the bus page accepts (the gateway validates it again).
MAX_FILTER_CHARS: Final = 200

_env = jinja2.Environment(
    loader=jinja2.FileSystemLoader(_TEMPLATES),
    autoescape=True,
    undefined=jinja2.StrictUndefined,
    trim_blocks=True,
    lstrip_blocks=True,
)


def when(value: str | None) -> str:
    """An ISO time as ``2026-11-25 20:26:20 UTC`` (its own text when it is not one)."""
    if not value:
        return "—"
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        return value
    if moment.tzinfo is not None:
        moment = moment.astimezone(UTC)
    return moment.strftime("%Y-%m-%d %H:%M:%S") + (" UTC" if moment.tzinfo is not None else "")


_env.filters["when"] = when


def status_of(error: JidoError) -> int:
    """The HTTP status for a failed call (502 for an error of a type not listed)."""
    for cls, status in _STATUS:
        if isinstance(error, cls):
            return status
    return 502


def render(template: str, page: str, *, status: int = 200, **values: Any) -> HTMLResponse:
    values.setdefault("error", None)
    html = _env.get_template(template).render(page=page, base=BASE, static=STATIC, **values)
    return HTMLResponse(html, status_code=status, headers=SECURITY_HEADERS)


def _failure(template: str, page: str, error: JidoError, **values: Any) -> HTMLResponse:
    return render(template, page, status=status_of(error), error=f"{error.error_type}: {error}", **values)


class Pages:
    """The page handlers over one gateway context."""

    def __init__(self, ctx: GatewayContext) -> None:
        self.ctx = ctx

    async def projects(self, request: Request) -> Response:
        """``/``: the running projects, and a form to start one by path."""
        try:
            listing = await self.ctx.engine().list_projects()
        except JidoError as exc:
            return _failure("projects.html", "projects", exc, projects=[])
        return render("projects.html", "projects", projects=listing.projects)

    async def project(self, request: Request) -> Response:
        """A project: its conversations (start one) and its tools."""
        pid = request.path_params["project_id"]
        try:
            validate_token(pid, "project id")
        except ValueError as exc:
            return render("message.html", "projects", status=400, error=str(exc))
        try:
            info = await self.ctx.project(pid).info()
            conversations = await self.ctx.conversations(pid).list(limit=MAX_CONVERSATIONS)
        except JidoError as exc:
            return _failure("message.html", "projects", exc)
        tools: list[Any] = []
        tools_error = None
        try:
            tools = list((await self.ctx.project(pid).list_tools()).tools)
        except JidoError as exc:
            tools_error = f"the tool catalogue is not available ({exc.error_type}: {exc})"
        return render(
            "project.html",
            "projects",
            project=info,
            conversations=conversations.conversations,
            truncated=conversations.truncated,
            tools=tools,
            tools_error=tools_error,
        )

    async def conversation(self, request: Request) -> Response:
        """A conversation's live timeline, its composer, approvals and usage."""
        pid = request.path_params["project_id"]
        cid = request.path_params["conversation_id"]
        try:
            validate_token(pid, "project id")
            validate_token(cid, "conversation id")
        except ValueError as exc:
            return render("message.html", "projects", status=400, error=str(exc))
        try:
            found = await self.ctx.conversations(pid).list(conversation_id=cid, limit=1)
        except JidoError as exc:
            return _failure("message.html", "projects", exc)
        if not found.conversations:
            return render(
                "message.html", "projects", status=404, error=f"no conversation {cid!r} in project {pid!r}"
            )
        return render("conversation.html", "conversation", project_id=pid, conversation_id=cid)

    async def bus(self, request: Request) -> Response:
        """Every event on the bus as it happens, filtered by project, conversation and type."""
        filters = {
            name: request.query_params.get(name, "").strip() for name in ("project", "conversation", "type")
        }
        for name, value in filters.items():
            if len(value) > MAX_FILTER_CHARS:
                return render(
                    "message.html",
                    "bus",
                    status=400,
                    error=f"the {name} filter is longer than {MAX_FILTER_CHARS} characters",
                )
        return render("bus.html", "bus", filters=filters, event_types=_BUS_TYPES)

    async def prds(self, request: Request) -> Response:
        """A project's PRDs: stories passed, the one in progress, the loop's state."""
        pid = request.path_params["project_id"]
        try:
            validate_token(pid, "project id")
        except ValueError as exc:
            return render("message.html", "projects", status=400, error=str(exc))
        try:
            # the engine's registry names the project (the page needs only the prd service and it)
            projects = (await self.ctx.engine().list_projects()).projects
            info = next((p for p in projects if p.project_id == pid), None)
            if info is None:
                return render("message.html", "projects", status=404, error=f"no project {pid!r}")
            listing = await self.ctx.prd(pid).list()
        except JidoError as exc:
            return _failure("message.html", "projects", exc)
        return render("prds.html", "projects", project=info, prds=listing.prds)

    async def prd(self, request: Request) -> Response:
        """A PRD: its stories, its loop with pause/resume/stop, and its events live."""
        pid = request.path_params["project_id"]
        name = request.path_params["name"]
        try:
            validate_token(pid, "project id")
        except ValueError as exc:
            return render("message.html", "projects", status=400, error=str(exc))
        if not _PRD_NAME.match(name):
            return render(
                "message.html",
                "projects",
                status=400,
                error=f"invalid PRD name {name!r}: use 1 to 64 letters, digits, '_' or '-'",
            )
        try:
            view = await self.ctx.prd(pid).get(name)
        except JidoError as exc:
            return _failure("message.html", "projects", exc)
        stories = view.prd.get("userStories", [])
        return render(
            "prd.html",
            "prd",
            project_id=pid,
            view=view,
            loop=view.loop,
            stories=[s for s in stories if isinstance(s, dict)] if isinstance(stories, list) else [],
            event_types=_PRD_TYPES,
        )
