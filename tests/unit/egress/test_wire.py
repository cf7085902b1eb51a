"""The proxy's request heads and answers, and web_fetch's text, pure."""

from __future__ import annotations

import base64

import pytest

from jidocode.services.tool_runner.tools.web_fetch import _as_text
from jidocode.shared.egress._wire import answer, origin_head, parse_head, split_authority
from jidocode.shared.errors import InvalidInput


def _head(first: str, *headers: str) -> bytes:
    return ("\r\n".join([first, *headers]) + "\r\n\r\n").encode()


def test_the_token_is_the_password_of_basic_proxy_authorization() -> None:
    auth = base64.b64encode(b"jido:s3cret").decode()
    request = parse_head(_head("CONNECT pypi.org:443 HTTP/1.1", f"Proxy-Authorization: Basic {auth}"))
    assert not isinstance(request, str)
    assert (request.method, request.target, request.token) == ("CONNECT", "pypi.org:443", "s3cret")
    for bad in ("Bearer x", "Basic !!!", f"Basic {base64.b64encode(b'jido').decode()}", ""):
        other = parse_head(_head("CONNECT a.org:443 HTTP/1.1", f"Proxy-Authorization: {bad}"))
        assert not isinstance(other, str) and other.token is None


@pytest.mark.parametrize("head", [b"GET /\r\n\r\n", b"HELLO\r\n\r\n", _head("GET / HTTP/1.1", "no colon")])
def test_a_malformed_head_is_named(head: bytes) -> None:
    assert isinstance(parse_head(head), str)


def test_a_plain_request_goes_on_in_origin_form_without_the_proxys_headers() -> None:
    request = parse_head(
        _head(
            "POST http://pkg.test:8080/a/b?q=1 HTTP/1.1",
            "Host: internal.corp",
            "Proxy-Authorization: Basic eDp5",
            "Proxy-Connection: keep-alive",
            "Content-Length: 2",
        )
    )
    assert not isinstance(request, str)
    target = origin_head(request)
    assert not isinstance(target, str)
    host, port, head = target
    assert (host, port) == ("pkg.test", 8080)
    lines = head.decode().split("\r\n")
    assert lines[:2] == ["POST /a/b?q=1 HTTP/1.1", "Host: pkg.test:8080"]
    assert "Content-Length: 2" in lines and "Connection: close" in lines
    assert not any(line.lower().startswith(("proxy-", "host: internal")) for line in lines)
    https = parse_head(_head("GET https://pkg.test/ HTTP/1.1"))
    assert not isinstance(https, str) and isinstance(origin_head(https), str)


@pytest.mark.parametrize(
    ("authority", "expected"),
    [
        ("pypi.org:443", ("pypi.org", 443)),
        ("[::1]:8443", ("::1", 8443)),
        ("pypi.org", None),
        ("a@b.org:1", None),
    ],
)
def test_connect_authorities(authority: str, expected: tuple[str, int] | None) -> None:
    got = split_authority(authority)
    assert got == expected if expected else isinstance(got, str)


def test_the_proxys_own_answers_are_marked_and_one_line() -> None:
    text = answer(403, "refused:\r\nX-Injected: 1", authenticate=True).decode()
    head, _, body = text.partition("\r\n\r\n")
    assert head.startswith("HTTP/1.1 403 Forbidden") and "X-Jido-Egress: refused" in head
    assert 'Proxy-Authenticate: Basic realm="jidocode"' in head
    assert body == "refused:  X-Injected: 1\n"


def test_web_fetch_text_is_markdown_for_html_and_refused_for_binaries() -> None:
    html = b"<h1>Title</h1><p>Some <b>bold</b> text.</p><script>x()</script>"
    text = _as_text(html, "text/html; charset=utf-8", "utf-8")
    assert "# Title" in text and "**bold**" in text and "<p>" not in text
    assert _as_text(b'{"a": 1}', "application/json", None) == '{"a": 1}'
    with pytest.raises(InvalidInput, match="image/png"):
        _as_text(b"\x89PNG", "image/png", None)
