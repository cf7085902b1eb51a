"""The gateway's live web console: server-rendered pages and a little vanilla JavaScript.

=================================================  =====================================================
path                                               page
=================================================  =====================================================
``/``                                              the projects; start one by path, stop one
``/console/projects/{pid}``                        a project: its conversations (start one), its tools
``/console/projects/{pid}/conversations/{cid}``    a conversation's timeline, live: messages streaming,
                                                   tool calls, approvals to click, usage and cost;
                                                   the message box, cancel and resume
``/console/projects/{pid}/prds``                   a project's PRDs (seed 004) and their loops' state
``/console/projects/{pid}/prds/{name}``            a PRD: its stories, its loop with run, pause, resume
                                                   and stop, and its events live
``/console/bus``                                   every event on the bus as it happens, filtered by
                                                   ``?project=&conversation=&type=``
``/console/static/…``                              the stylesheet and the scripts (no CDN, no build)
=================================================  =====================================================

Every path needs the gateway's token (the cookie ``/login?token=`` sets). The pages read
through the typed clients; the scripts (``static/``) use only the gateway's JSON API and its
SSE routes, so the console can do nothing another client of the API could not.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles

from .pages import BASE, STATIC, STATIC_DIR, Pages

if TYPE_CHECKING:
    from jidocode.services.gateway.context import GatewayContext

__all__ = ["routes"]


def routes(ctx: GatewayContext) -> list[BaseRoute]:
    """The console's routes, mounted by :func:`jidocode.services.gateway.app.create_app`."""
    pages = Pages(ctx)
    return [
        Route("/", pages.projects, methods=["GET"], name="console-projects"),
        Route(f"{BASE}/projects/{{project_id}}", pages.project, methods=["GET"], name="console-project"),
        Route(
            f"{BASE}/projects/{{project_id}}/conversations/{{conversation_id}}",
            pages.conversation,
            methods=["GET"],
            name="console-conversation",
        ),
        Route(f"{BASE}/bus", pages.bus, methods=["GET"], name="console-bus"),
        Route(f"{BASE}/projects/{{project_id}}/prds", pages.prds, methods=["GET"], name="console-prds"),
        Route(
            f"{BASE}/projects/{{project_id}}/prds/{{name}}", pages.prd, methods=["GET"], name="console-prd"
        ),
        Mount(STATIC, app=StaticFiles(directory=STATIC_DIR), name="console-static"),
    ]
