"""The gateway's own origin and its same-origin and MCP Host/Origin rules (:mod:`.origin`), as tables."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from jidocode.services.gateway.console.pages import SECURITY_HEADERS
from jidocode.services.gateway.origin import (
    OwnOrigin,
    is_mcp_path,
    mcp_refusal,
    parse_public_url,
    state_change_refusal,
)
from jidocode.services.gateway.settings import GatewaySettings

LOCAL = OwnOrigin.of("127.0.0.1", 8765)


@pytest.mark.parametrize(
    ("host", "port", "public", "hosts"),
    [
        ("127.0.0.1", 8765, (), ("localhost:8765", "127.0.0.1:8765", "[::1]:8765")),
        ("localhost", 8765, (), ("localhost:8765", "127.0.0.1:8765", "[::1]:8765")),
        ("::1", 9000, (), ("localhost:9000", "127.0.0.1:9000", "[::1]:9000")),
        ("127.0.0.2", 9000, (), ("localhost:9000", "127.0.0.1:9000", "[::1]:9000", "127.0.0.2:9000")),
        ("0.0.0.0", 8765, (), ("localhost:8765", "127.0.0.1:8765", "[::1]:8765")),
        ("::", 8765, (), ("localhost:8765", "127.0.0.1:8765", "[::1]:8765")),
        ("10.1.2.3", 8765, (), ("10.1.2.3:8765",)),
        ("fd00::5", 8765, (), ("[fd00::5]:8765",)),
        (
            "0.0.0.0",
            8765,
            ("https://Jido.Example.com/", "http://jido.lan:8080"),
            ("localhost:8765", "127.0.0.1:8765", "[::1]:8765", "jido.example.com", "jido.lan:8080"),
        ),
    ],
)
def test_the_hosts_that_name_the_gateway(
    host: str, port: int, public: tuple[str, ...], hosts: tuple[str, ...]
) -> None:
    own = OwnOrigin.of(host, port, public)
    assert own.hosts == hosts
    assert len(own.origins) == len(hosts)


def test_port_80_is_also_named_without_it_and_origins_are_what_browsers_send() -> None:
    own = OwnOrigin.of("10.0.0.1", 80, ["https://jido.example.com:443"])
    assert own.hosts == ("10.0.0.1:80", "10.0.0.1", "jido.example.com")
    assert own.origins == ("http://10.0.0.1:80", "http://10.0.0.1", "https://jido.example.com")


def test_the_port_must_be_the_real_one() -> None:
    with pytest.raises(ValueError, match="the one it listens on"):
        OwnOrigin.of("127.0.0.1", 0)


@pytest.mark.parametrize(
    ("url", "problem"),
    [
        ("ftp://jido.example.com", "http:// or https://"),
        ("jido.example.com", "http:// or https://"),
        ("https://", "http:// or https://"),
        ("https://jido.example.com/console", "no path"),
        ("https://jido.example.com?x=1", "no path"),
        ("https://user:pw@jido.example.com", "no path"),
        ("https://jido.example.com:99999", "invalid port"),
    ],
)
def test_a_public_url_is_an_origin_only(url: str, problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        parse_public_url(url)
    with pytest.raises(ValidationError, match=problem):
        GatewaySettings(public_urls=(url,))


def test_public_urls_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JIDO_GATEWAY_PUBLIC_URL", " https://a.example , http://b.example:8080 ,")
    assert GatewaySettings.from_env().public_urls == ("https://a.example", "http://b.example:8080")


JSON = {"content-type": "application/json"}
OWN = {"origin": "http://127.0.0.1:8765"}


@pytest.mark.parametrize(
    ("method", "headers", "bearer", "status", "words"),
    [
        # safe methods and bearer requests are never judged here
        ("GET", {"origin": "http://evil.example"}, False, None, ()),
        ("HEAD", {}, False, None, ()),
        ("OPTIONS", {"origin": "http://evil.example"}, False, None, ()),
        ("POST", {"origin": "http://evil.example", "content-type": "text/plain"}, True, None, ()),
        # same origin and JSON: served (charset and case do not matter; localhost is the same gateway)
        ("POST", {**OWN, **JSON}, False, None, ()),
        (
            "DELETE",
            {"origin": "http://localhost:8765", "content-type": "Application/JSON; charset=utf-8"},
            False,
            None,
            (),
        ),
        ("PUT", {"referer": "http://127.0.0.1:8765/console/projects/p", **JSON}, False, None, ()),
        # another origin, even of the same site (another port)
        (
            "POST",
            {"origin": "http://127.0.0.1:3000", **JSON},
            False,
            403,
            ("'http://127.0.0.1:3000'", "Origin"),
        ),
        (
            "POST",
            {"origin": "http://evil.example", "content-type": "text/plain"},
            False,
            403,
            ("evil.example",),
        ),
        ("PATCH", {"origin": "https://127.0.0.1:8765", **JSON}, False, 403, ("https://127.0.0.1:8765",)),
        ("POST", {"origin": "null", **JSON}, False, 403, ("'null'",)),
        ("POST", {"referer": "http://evil.example/x", **JSON}, False, 403, ("Referer", "evil.example")),
        (
            "POST",
            {"origin": "http://evil.example", "referer": "http://127.0.0.1:8765/", **JSON},
            False,
            403,
            (),
        ),
        ("POST", JSON, False, 403, ("no Origin or Referer", "Authorization: Bearer")),
        ("POST", {"referer": "not a url", **JSON}, False, 403, ("no Origin or Referer",)),
        # own origin, but not JSON: forms and text/plain need no preflight
        ("POST", {**OWN, "content-type": "text/plain"}, False, 415, ("'text/plain'", "application/json")),
        ("POST", {**OWN, "content-type": "application/x-www-form-urlencoded"}, False, 415, ("urlencoded",)),
        ("POST", {**OWN, "content-type": "multipart/form-data; boundary=x"}, False, 415, ("multipart",)),
        ("POST", {**OWN, "content-type": "application/jsonp"}, False, 415, ()),
        ("POST", OWN, False, 415, ("'none'",)),
    ],
)
def test_which_state_changes_the_cookie_may_make(
    method: str, headers: dict[str, str], bearer: bool, status: int | None, words: tuple[str, ...]
) -> None:
    refusal = state_change_refusal(LOCAL, method, headers, bearer=bearer)
    if status is None:
        assert refusal is None
        return
    assert refusal is not None
    assert refusal.status == status
    assert refusal.error_type == ("permission_denied" if status == 403 else "unsupported_media_type")
    for word in words:
        assert word in refusal.message


@pytest.mark.parametrize(
    ("headers", "refused", "word"),
    [
        ({"host": "127.0.0.1:8765"}, False, ""),
        ({"host": "LOCALHOST:8765", "origin": "http://localhost:8765"}, False, ""),
        ({"host": "[::1]:8765", "origin": "http://127.0.0.1:8765"}, False, ""),
        ({}, True, "Host None"),
        ({"host": "evil.example:8765"}, True, "Host 'evil.example:8765'"),
        ({"host": "127.0.0.1:9999"}, True, "Host"),
        ({"host": "127.0.0.1:8765", "origin": "http://evil.example"}, True, "Origin 'http://evil.example'"),
        ({"host": "127.0.0.1:8765", "origin": "http://127.0.0.1:3000"}, True, "Origin"),
        ({"host": "127.0.0.1:8765", "origin": "null"}, True, "Origin 'null'"),
    ],
)
def test_mcp_needs_the_gateways_host_and_origin(headers: dict[str, str], refused: bool, word: str) -> None:
    refusal = mcp_refusal(LOCAL, headers)
    assert (refusal is not None) == refused
    if refusal is not None:
        assert (refusal.status, refusal.error_type) == (403, "permission_denied")
        assert word in refusal.message


@pytest.mark.parametrize(
    ("path", "mcp"),
    [
        ("/projects/p1/mcp", True),
        ("/projects/p1/mcp/", True),
        ("/projects/p1/mcpx", False),
        ("/projects/p1/a2a/jsonrpc", False),
        ("/api/projects/p1/mcp", False),
        ("/projects/a/b/mcp", False),
    ],
)
def test_which_paths_are_mcp(path: str, mcp: bool) -> None:
    assert is_mcp_path(path) is mcp


def test_console_pages_let_the_browser_say_their_origin() -> None:
    # no-referrer would make a browser send "Origin: null" on the console's own POSTs
    assert SECURITY_HEADERS["Referrer-Policy"] == "same-origin"


def test_the_openapi_document_names_the_refusals_of_a_state_change() -> None:
    from jidocode.services.gateway.openapi import openapi_document

    paths = openapi_document()["paths"]
    assert {"403", "415"} <= set(paths["/api/projects"]["post"]["responses"])
    assert not {"403", "415"} & set(paths["/api/projects"]["get"]["responses"])


@pytest.mark.parametrize(
    ("headers", "by_header"),
    [
        ({"authorization": "Bearer " + "t" * 30}, True),
        ({"authorization": "bearer " + "t" * 30, "cookie": "jidocode_token=" + "t" * 30}, True),
        ({"cookie": "jidocode_token=" + "t" * 30}, False),
        ({"authorization": "Bearer", "cookie": "jidocode_token=" + "t" * 30}, False),
        ({"authorization": "Basic " + "t" * 30, "cookie": "jidocode_token=" + "t" * 30}, False),
        ({"authorization": "Bearer " + "x" * 30}, False),
    ],
)
def test_only_a_bearer_header_with_the_token_waives_the_origin_check(
    headers: dict[str, str], by_header: bool
) -> None:
    from starlette.requests import HTTPConnection

    from jidocode.services.gateway.auth import TokenChecker

    raw = [(k.encode(), v.encode()) for k, v in headers.items()]
    conn = HTTPConnection({"type": "http", "headers": raw, "path": "/", "query_string": b""})
    assert TokenChecker("t" * 30).allows_by_header(conn) is by_header


def test_the_gateway_binds_first_so_its_origin_has_the_real_port() -> None:
    from jidocode.services.gateway.service import listen

    with listen("localhost", 0) as first:
        host, port = first.getsockname()[:2]
        assert host == "127.0.0.1" and port > 0  # a name binds IPv4 first: the URL `up` prints
        assert f"127.0.0.1:{port}" in OwnOrigin.of("localhost", port).hosts
        with pytest.raises(OSError, match=f"the gateway cannot listen on 127.0.0.1:{port}: "):
            listen("127.0.0.1", port)
