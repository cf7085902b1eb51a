"""The console's pages and files without a running system: escaping, headers, limits, and
that its scripts name only catalogue event types and fetch nothing from the network."""

from __future__ import annotations

import re
from pathlib import Path
from typing import cast

import pytest
from hypothesis import given
from hypothesis import strategies as st
from starlette.applications import Starlette
from starlette.testclient import TestClient

from jidocode.services.gateway.console import routes
from jidocode.services.gateway.console.pages import (
    MAX_FILTER_CHARS,
    SECURITY_HEADERS,
    STATIC_DIR,
    render,
    status_of,
    when,
)
from jidocode.services.gateway.context import GatewayContext
from jidocode.shared.errors import (
    Conflict,
    InvalidInput,
    JidoError,
    NotFound,
    RemoteError,
    RequestTimeout,
    ServiceUnavailable,
)
from jidocode.shared.events import EVENT_TYPES
from jidocode.shared.events.conversation import ConversationSummary
from jidocode.shared.events.engine import ProjectInfo

PACKAGE = STATIC_DIR.parent
FILES = sorted(p for p in PACKAGE.rglob("*") if p.suffix in {".html", ".js", ".css"})


@pytest.fixture
def client() -> TestClient:
    """The console's routes alone; the pages used here never reach the context."""
    app = Starlette(routes=routes(cast(GatewayContext, object())))
    return TestClient(app)


def test_the_package_holds_its_pages_and_scripts() -> None:
    names = {p.name for p in FILES}
    assert {"base.html", "conversation.html", "bus.html", "console.js", "timeline.js", "console.css"} <= names


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_nothing_is_fetched_from_the_network(path: Path) -> None:
    text = path.read_text()
    assert not re.search(r"(https?:)?//[a-z0-9.-]+\.[a-z]{2,}", text, re.IGNORECASE), path
    assert "@import" not in text and "innerHTML" not in text and "outerHTML" not in text


def test_the_scripts_name_only_event_types_of_the_catalogue() -> None:
    named: set[str] = set()
    for script in STATIC_DIR.glob("*.js"):
        named |= set(
            re.findall(r'"((?:conversation|llm|tool|project|engine)\.[a-z_.]+)"', script.read_text())
        )
    assert named, "the timeline names the types it renders"
    assert named <= EVENT_TYPES, sorted(named - EVENT_TYPES)


@given(st.text(min_size=1, max_size=40))
def test_a_project_path_is_rendered_as_text(text: str) -> None:
    project = ProjectInfo(project_id="p1", root_path=f"/tmp/<script>{text}</script>", started_at="now")
    html = render("projects.html", "projects", projects=[project]).body.decode()
    assert "<script>" not in html.split("</head>", 1)[1]
    assert "&lt;script&gt;" in html


def test_pages_forbid_scripts_from_elsewhere(client: TestClient) -> None:
    response = client.get("/console/bus")
    assert response.status_code == 200
    for name, value in SECURITY_HEADERS.items():
        assert response.headers[name] == value
    csp = response.headers["content-security-policy"]
    assert "script-src 'self'" in csp and "unsafe-inline" not in csp
    assert 'src="/console/static/bus.js"' in response.text


def test_the_bus_page_keeps_its_filters_escaped(client: TestClient) -> None:
    response = client.get("/console/bus", params={"project": 'p"><b>x', "type": "tool.*"})
    assert 'value="p&#34;&gt;&lt;b&gt;x"' in response.text
    assert 'value="tool.*"' in response.text
    # every catalogue type is listed for the page's EventSource
    assert "llm.completed" in response.text and "conversation.user.message" in response.text


def test_a_filter_over_the_limit_is_refused(client: TestClient) -> None:
    assert client.get("/console/bus", params={"type": "x" * MAX_FILTER_CHARS}).status_code == 200
    response = client.get("/console/bus", params={"type": "x" * (MAX_FILTER_CHARS + 1)})
    assert response.status_code == 400
    assert f"the type filter is longer than {MAX_FILTER_CHARS} characters" in response.text


@pytest.mark.parametrize(
    "path",
    [
        "/console/projects/a.b",
        "/console/projects/p/conversations/c*",
        "/console/projects/p/conversations/c%20d",
    ],
)
def test_an_id_that_is_no_subject_token_is_refused(client: TestClient, path: str) -> None:
    response = client.get(path)
    assert response.status_code == 400
    assert "invalid" in response.text and "expected 1-128 characters" in response.text


def test_static_files_are_served(client: TestClient) -> None:
    response = client.get("/console/static/timeline.js")
    assert response.status_code == 200
    assert "javascript" in response.headers["content-type"]
    assert client.get("/console/static/../pages.py").status_code == 404


@pytest.mark.parametrize(
    ("error", "status"),
    [
        (InvalidInput("x"), 400),
        (NotFound("x"), 404),
        (Conflict("x"), 409),
        (ServiceUnavailable("x"), 503),
        (RequestTimeout("x"), 503),
        (RemoteError("x"), 502),
    ],
)
def test_status_of_an_error(error: JidoError, status: int) -> None:
    assert status_of(error) == status


def test_console_paths_leave_the_contract_s_paths_alone() -> None:
    paths = [getattr(r, "path", "") for r in routes(cast(GatewayContext, object()))]
    assert paths[0] == "/"
    for path in paths[1:]:
        assert path.startswith("/console/"), path


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        ("2026-11-25T20:26:20.407530+00:00", "2026-11-25 20:26:20 UTC"),
        ("2026-11-25T21:26:20+01:00", "2026-11-25 20:26:20 UTC"),
        ("2026-11-25T20:26:20", "2026-11-25 20:26:20"),
        ("not a time", "not a time"),
        (None, "—"),
        ("", "—"),
    ],
)
def test_times_are_shown_short(value: str | None, shown: str) -> None:
    assert when(value) == shown


def test_a_project_page_says_when_its_list_is_cut() -> None:
    project = ProjectInfo(project_id="p1", root_path="/tmp/p", started_at="2026-11-25T20:00:00+00:00")
    listed = [ConversationSummary(conversation_id=f"c{i}", status="active") for i in range(2)]
    for truncated in (False, True):
        html = render(
            "project.html",
            "projects",
            project=project,
            conversations=listed,
            truncated=truncated,
            tools=[],
            tools_error=None,
        ).body.decode()
        assert 'href="/console/projects/p1/conversations/c1"' in html
        assert ("Only the newest 2 are listed." in html) is truncated
