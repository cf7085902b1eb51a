"""The console's PRD pages without a system: escaping of PRD text, a bad name refused before any
call, the page's event types are the PRD catalogue's, the API table has every PRD operation."""

from __future__ import annotations

import json
from typing import cast

import pytest
from starlette.applications import Starlette
from starlette.testclient import TestClient

from jidocode.services.gateway.api import API_ROUTES
from jidocode.services.gateway.console import routes
from jidocode.services.gateway.console.pages import render
from jidocode.services.gateway.context import GatewayContext
from jidocode.services.gateway.openapi import openapi_document
from jidocode.shared.events.engine import ProjectInfo
from jidocode.shared.events.prd import PRD_EVENTS, LoopInfo, PrdSummary, PrdView

HOSTILE = '<script>alert(1)</script><img src=x onerror="x()">'


@pytest.fixture
def client() -> TestClient:
    return TestClient(Starlette(routes=routes(cast(GatewayContext, object()))))


def test_a_prd_page_shows_its_text_as_text() -> None:
    prd = {
        "name": "auth",
        "title": HOSTILE,
        "userStories": [{"id": "US-1", "title": HOSTILE, "passes": True}],
    }
    loop = LoopInfo(project_id="p1", prd="auth", state="error", story_id="US-1", attempt=2, error=HOSTILE)
    view = PrdView(project_id="p1", name="auth", path="/r/.daedalus/prds/auth", prd=prd, loop=loop)
    types = json.dumps(sorted(str(m.model_fields["type"].default) for m in PRD_EVENTS))
    html = render(
        "prd.html",
        "prd",
        project_id="p1",
        view=view,
        loop=loop,
        stories=prd["userStories"],
        event_types=types,
    ).body.decode()
    assert "<script>alert" not in html and "<img" not in html
    assert html.count("&lt;script&gt;alert(1)&lt;/script&gt;") == 3  # title, story, loop error
    assert 'src="/console/static/prd.js"' in html and 'data-prd="auth"' in html
    assert '<li data-story-id="US-1" class="story passed">' in html
    assert "story US-1 · attempt 2" in html
    page_types = json.loads(html.split('data-event-types="')[1].split('"')[0].replace("&#34;", '"'))
    assert set(page_types) == {str(m.model_fields["type"].default) for m in PRD_EVENTS}


def test_the_prd_list_links_each_prd() -> None:
    project = ProjectInfo(project_id="p1", root_path="/r", started_at="2026-11-25T20:00:00+00:00")
    prds = [
        PrdSummary(name="auth", title="Auth", stories=2, passed=1, state="running"),
        PrdSummary(name="bad", problem=HOSTILE),
    ]
    html = render("prds.html", "projects", project=project, prds=prds).body.decode()
    assert 'href="/console/projects/p1/prds/auth"' in html and "1/2" in html and "badge running" in html
    assert "cannot load: &lt;script&gt;" in html
    assert "No PRD yet." in render("prds.html", "projects", project=project, prds=[]).body.decode()


@pytest.mark.parametrize(
    "path",
    ["/console/projects/p1/prds/a.b", "/console/projects/p1/prds/" + "x" * 65, "/console/projects/a.b/prds"],
)
def test_a_bad_name_is_refused_before_any_call(client: TestClient, path: str) -> None:
    response = client.get(path)  # the context is a bare object: a call would raise
    assert response.status_code == 400 and "invalid" in response.text


def test_every_prd_operation_is_in_the_api_and_openapi() -> None:
    table = {(r.method, r.path) for r in API_ROUTES}
    base = "/api/projects/{pid}/prds"
    assert {("GET", base), ("GET", base + "/{name}")} <= table
    assert {("POST", f"{base}/{{name}}/{verb}") for verb in ("run", "pause", "resume", "stop")} <= table
    paths = openapi_document()["paths"]
    assert paths[base + "/{name}/events"]["get"]["operationId"] == "prd_events"
    assert "Last-Event-ID" in [p["name"] for p in paths[base + "/{name}/events"]["get"]["parameters"]]
    assert paths[base + "/{name}/run"]["post"]["requestBody"]["content"]["application/json"]["schema"]
