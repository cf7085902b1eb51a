"""The public card's pure parts (decision 0342): which paths need no token, and what the public
card says. The token exemption must cover the card routes and nothing else the gateway routes."""

from __future__ import annotations

from typing import Any, cast

from google.protobuf.json_format import MessageToDict
from hypothesis import given
from hypothesis import strategies as st
from starlette.routing import BaseRoute, Match, Route

from jidocode.services.gateway import a2a
from jidocode.services.gateway.a2a.card import build_public_card, is_card_path
from jidocode.services.gateway.context import GatewayContext
from jidocode.services.gateway.middleware import _is_public

_CARD = "/.well-known/agent-card.json"
#: The A2A routes of a gateway (their handlers are never called here).
_ROUTES: list[BaseRoute] = a2a.routes(cast(GatewayContext, object()))
_CARD_HANDLERS = {"card", "_no_project_in_url"}

#: Path pieces: a project id, the pieces of the A2A routes, an empty one (``//``) and others.
_segment = st.sampled_from(
    ["p1", "01M8JSV7RHZCVAXM46KVHK2K5E", "a2a", "", "rest", "jsonrpc", "mcp", ".well-known"]
)
#: The card's own tail half of the time, so that card paths are drawn about as often as others.
_tail = st.one_of(
    st.just(_CARD), st.sampled_from(["", "/", "/" + _CARD, "/agent-card.json", "/.well-known/agent.json"])
)


@st.composite
def _paths(draw: st.DrawFn) -> str:
    """Paths near the card's: mostly ``/projects``, up to three pieces, then a tail."""
    prefix = draw(st.one_of(st.just("/projects"), st.sampled_from(["", "/api", "/projects/p1/a2a/rest"])))
    segments = draw(
        st.lists(st.one_of(_segment.filter(lambda s: s in ("p1", "a2a", "")), _segment), max_size=3)
    )
    return prefix + "".join("/" + s for s in segments) + draw(_tail)


def _routed_to_a_card(path: str) -> bool:
    """Whether a ``GET`` of ``path`` reaches a card handler of the A2A routes (the first route
    matching path and method, as Starlette's router picks)."""
    scope: dict[str, Any] = {"type": "http", "path": path, "method": "GET", "root_path": ""}
    for route in _ROUTES:
        match, _ = route.matches(scope)
        if match is Match.FULL:
            name = getattr(route.endpoint, "__name__", "") if isinstance(route, Route) else ""
            return name in _CARD_HANDLERS
    return False


@given(_paths())
def test_the_token_exemption_is_exactly_the_card_routes(path: str) -> None:
    assert is_card_path(path) == _routed_to_a_card(path), path


def test_the_card_paths_of_a_project_and_of_the_gateway_are_public() -> None:
    for under in ("", "/", "/a2a", "/a2a/"):
        assert is_card_path(f"/projects/p1{under}{_CARD}")
    assert is_card_path(_CARD) and is_card_path("/projects" + _CARD)
    for path in (
        "/projects/p1/a2a/rest" + _CARD,
        "/projects/p1/a2a/jsonrpc",
        "/projects/p1/mcp",
        "/api/projects",
    ):
        assert not is_card_path(path)


def test_only_a_get_of_a_card_needs_no_token() -> None:
    def scope(method: str, path: str = f"/projects/p1{_CARD}", kind: str = "http") -> dict[str, Any]:
        return {"type": kind, "method": method, "path": path}

    assert _is_public(scope("GET")) and _is_public(scope("HEAD")) and _is_public(scope("GET", "/healthz"))
    assert not _is_public(scope("POST")) and not _is_public(scope("GET", "/projects/p1/a2a/jsonrpc"))
    assert not _is_public(scope("GET", kind="websocket"))


def test_the_public_card_says_how_to_call_and_nothing_of_the_project() -> None:
    card = MessageToDict(build_public_card("http://example.test:8765/", "P1"))
    assert card["name"] == "JidoCode"
    assert [s["id"] for s in card["skills"]] == ["conversation"]
    assert card["capabilities"] == {"streaming": True, "pushNotifications": False, "extendedAgentCard": True}
    assert {i["url"] for i in card["supportedInterfaces"]} == {
        "http://example.test:8765/projects/P1/a2a/jsonrpc",
        "http://example.test:8765/projects/P1/a2a/rest",
    }
    assert card["securityRequirements"] == [{"schemes": {"bearer": {}}}]
