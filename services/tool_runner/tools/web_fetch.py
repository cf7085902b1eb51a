"""web_fetch: one web page as readable text, fetched through the replica's egress proxy.

The call was authorized by the URL's host (``WebFetch(domain:…)`` rules and
``sandbox.allowed_domains``; with none matching the user was asked). The request goes
through the same egress proxy as a sandboxed program's, with a pass of this call (the approved
host among its hosts), so the proxy's checks apply unchanged: the host by the rules, then
every address it resolves to (never loopback, link-local or the runtime's own ports; a
private one only when an IP or CIDR entry names it), connected to as checked.

Redirects (at most :data:`MAX_REDIRECTS`) are followed only to hosts the rules *allow*: a
redirect to a host that is denied, asked about, or named by no rule ends the call with an
error naming it. The body is read up to ``max_bytes`` and the call's time limit; HTML becomes
markdown (``html2text``), other text is returned as it is, anything else is refused.
"""

from __future__ import annotations

from typing import Any, ClassVar, Final
from urllib.parse import urljoin

import html2text
import httpx

from jidocode.shared.egress import REFUSED_HEADER
from jidocode.shared.errors import InvalidInput, JidoError, PermissionDenied
from jidocode.shared.policy import Effect
from jidocode.shared.policy.network import host_decision, url_host
from jidocode.shared.sandbox import cap_text
from jidocode.shared.tools import specs
from jidocode.shared.tools.inputs import WebFetchInput

from .base import BuiltinTool, ToolContext

__all__ = ["MAX_REDIRECTS", "WEB_FETCH"]

#: Redirects followed at most.
MAX_REDIRECTS: Final = 5
_REDIRECTS: Final = frozenset({301, 302, 303, 307, 308})
_TEXT_TYPES: Final = ("text/", "application/json", "application/xml", "application/xhtml", "+json", "+xml")


class FetchFailed(JidoError):
    """The page could not be fetched (the proxy refused it, or the server did not answer)."""

    error_type: ClassVar[str] = "fetch_failed"


def _redirect_target(url: str, location: str, ctx: ToolContext) -> str:
    """The absolute URL of a redirect, refused unless the rules allow its host outright."""
    target = urljoin(url, location)
    where = url_host(target)
    if isinstance(where, str):
        raise PermissionDenied(f"redirect from {url} to {target!r} refused: {where}")
    decision = host_decision(ctx.policy, where[0])
    if decision.effect is not Effect.ALLOW:
        raise PermissionDenied(
            f"redirect from {url} to {target} refused: redirects are followed only to allowed hosts "
            f"({decision.reason})",
            details={"redirect": target, "decision": decision.effect.value},
        )
    return target


def _as_text(body: bytes, content_type: str, encoding: str | None) -> str:
    kind = content_type.split(";")[0].strip().lower()
    if not any(t in kind for t in _TEXT_TYPES) and kind:
        raise InvalidInput(f"the page is {kind}, not text: web_fetch returns only text and HTML")
    text = body.decode(encoding or "utf-8", "replace")
    if "html" in kind:
        converter = html2text.HTML2Text()
        converter.body_width = 0  # no hard wrapping: the model reads lines as they come
        converter.ignore_images = True
        return converter.handle(text)
    return text


async def _read(response: httpx.Response, limit: int) -> tuple[bytes, bool]:
    chunks: list[bytes] = []
    size = 0
    async for chunk in response.aiter_bytes():
        chunks.append(chunk)
        size += len(chunk)
        if size >= limit:
            return b"".join(chunks)[:limit], True
    return b"".join(chunks), False


async def _fetch(client: httpx.AsyncClient, args: WebFetchInput, ctx: ToolContext) -> dict[str, Any]:
    url = args.url
    redirects: list[str] = []
    while True:
        try:
            async with client.stream("GET", url) as response:
                if REFUSED_HEADER in response.headers:  # the proxy's own answer to a plain request
                    reason = (await response.aread()).decode("utf-8", "replace").strip()
                    raise PermissionDenied(reason, details={"url": url})
                if response.status_code in _REDIRECTS and "location" in response.headers:
                    if len(redirects) >= MAX_REDIRECTS:
                        raise FetchFailed(f"more than {MAX_REDIRECTS} redirects from {args.url}")
                    redirects.append(url)
                    url = _redirect_target(url, response.headers["location"], ctx)
                    continue
                body, cut = await _read(response, args.max_bytes)
                content_type = response.headers.get("content-type", "")
                status, encoding = response.status_code, response.charset_encoding
        except httpx.ProxyError as exc:
            raise PermissionDenied(f"web_fetch {url}: {exc}") from None
        except httpx.HTTPError as exc:
            raise FetchFailed(f"web_fetch {url}: {type(exc).__name__}: {exc}") from None
        text, capped = cap_text(_as_text(body, content_type, encoding).encode("utf-8"), ctx.output_cap)
        return {
            "url": url,
            "status": status,
            "content_type": content_type,
            "content": text,
            "truncated": cut or capped,
            "redirects": redirects,
        }


async def _web_fetch(args: WebFetchInput, ctx: ToolContext) -> dict[str, Any]:
    if ctx.egress is None:
        raise FetchFailed("web_fetch runs only in a tool runner (it fetches through its egress proxy)")
    proxy = httpx.Proxy(ctx.egress.proxy_url())
    timeout = httpx.Timeout(ctx.timeout_s)
    headers = {"Accept-Encoding": "identity"}  # the size cap counts what is read, not a bomb's expansion
    async with httpx.AsyncClient(proxy=proxy, timeout=timeout, trust_env=False, headers=headers) as client:
        return await _fetch(client, args, ctx)


WEB_FETCH = BuiltinTool(specs.WEB_FETCH, _web_fetch)
