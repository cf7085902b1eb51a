"""Asking a model endpoint whether it answers: Ollama's model list, a provider's key check.

The I/O beside :mod:`jidocode.shared.llm_choice` (which decides from the
answers). Both requests are cheap reads that spend no tokens: a model list,
or OpenRouter's key endpoint. Neither follows redirects, and a key is only
ever sent to the endpoint it is configured with (the caller's pairing, see
``docs/llm.md``); no key value appears in a result.

httpx is imported when a request is made, so importing this module costs
nothing to a CLI command that never probes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

__all__ = ["OLLAMA_PROBE_TIMEOUT_S", "EndpointCheck", "OllamaProbe", "check_endpoint", "probe_ollama"]

#: Lists the models of the Ollama at a URL, ``None`` when it does not answer (blocking).
OllamaProbe = Callable[[str], list[str] | None]

#: How long the Ollama probe waits: a local server answers in milliseconds.
OLLAMA_PROBE_TIMEOUT_S = 0.5
#: How long a provider gets to answer ``doctor``'s request.
ENDPOINT_TIMEOUT_S = 10.0

#: Where a provider's own models (or key) can be read, and how its key is sent.
_PROVIDER_ENDPOINTS: dict[str, tuple[str, str]] = {
    "openai": ("https://api.openai.com/v1/models", "bearer"),
    "anthropic": ("https://api.anthropic.com/v1/models?limit=1000", "x-api-key"),
    "gemini": ("https://generativelanguage.googleapis.com/v1beta/models?pageSize=1000", "x-goog-api-key"),
    "openrouter": ("https://openrouter.ai/api/v1/key", "bearer"),
}


@dataclass(frozen=True)
class EndpointCheck:
    """What a model endpoint said: ``ok`` (it answered and knows the model), ``warn`` or ``fail``."""

    status: Literal["ok", "warn", "fail"]
    detail: str


def _get(url: str, headers: dict[str, str], timeout: float) -> Any:
    import httpx  # here: most commands that import this module never make a request

    return httpx.get(url, headers=headers, timeout=timeout, follow_redirects=False)


def probe_ollama(url: str, *, timeout: float = OLLAMA_PROBE_TIMEOUT_S) -> list[str] | None:
    """The model names a local Ollama at ``url`` lists, or ``None`` when it does not answer as Ollama."""
    try:
        response = _get(f"{url}/api/tags", {}, timeout)
        if response.status_code != 200:
            return None
        models = response.json().get("models")
    except Exception:  # not there, too slow, not Ollama, not JSON: all mean "no Ollama"
        return None
    if not isinstance(models, list):
        return None
    return [str(m["name"]) for m in models if isinstance(m, dict) and isinstance(m.get("name"), str)]


def _listed_ids(body: Any) -> list[str]:
    """Model ids of an OpenAI-style (``data``), Anthropic-style (``data``) or Gemini-style list."""
    if not isinstance(body, dict):
        return []
    items = body.get("data") or body.get("models") or []
    ids: list[str] = []
    for item in items if isinstance(items, list) else []:
        if isinstance(item, dict):
            ids += [str(item[k]) for k in ("id", "name") if isinstance(item.get(k), str)]
    return ids


def _names_model(model: str, ids: Sequence[str]) -> bool:
    """Whether a list of ids names ``model`` (with or without its provider prefix)."""
    bare = model.split("/", 1)[1] if "/" in model else model
    wanted = {model, bare, f"models/{bare}"}
    return any(i in wanted or i.split(":", 1)[0] == bare for i in ids)


def _target(model: str, api_base: str | None, api_key: str | None) -> tuple[str, dict[str, str]] | None:
    """The URL to ask and its headers, or ``None`` for a provider this cannot check."""
    provider = model.split("/", 1)[0] if "/" in model else ""
    if provider in ("ollama", "ollama_chat"):
        return f"{(api_base or 'http://127.0.0.1:11434').rstrip('/')}/api/tags", {}
    if api_base:
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        return f"{api_base.rstrip('/')}/models", headers
    if provider not in _PROVIDER_ENDPOINTS:
        return None
    url, style = _PROVIDER_ENDPOINTS[provider]
    if style == "bearer":
        return url, {"Authorization": f"Bearer {api_key or ''}"}
    if style == "x-api-key":
        return url, {"x-api-key": api_key or "", "anthropic-version": "2023-06-01"}
    return url, {"x-goog-api-key": api_key or ""}


def check_endpoint(
    model: str, *, api_base: str | None, api_key: str | None, timeout: float = ENDPOINT_TIMEOUT_S
) -> EndpointCheck:
    """Ask the endpoint ``model`` would be called at whether it answers, takes the key and knows the model."""
    target = _target(model, api_base, api_key)
    if target is None:
        return EndpointCheck("warn", f"not checked: no request known for {model.split('/', 1)[0]!r} models")
    url, headers = target
    try:
        response = _get(url, headers, timeout)
    except Exception as exc:  # refused, unreachable, timed out, a bad URL: the endpoint did not answer
        return EndpointCheck("fail", f"{url} did not answer: {type(exc).__name__}: {exc}")
    status = int(response.status_code)
    if status in (401, 403):
        return EndpointCheck("fail", f"{url} refused the key (HTTP {status})")
    if status != 200:
        return EndpointCheck("fail", f"{url} answered HTTP {status}")
    if url.endswith("/key"):
        return EndpointCheck("ok", f"{url} accepted the key")
    try:
        ids = _listed_ids(response.json())
    except ValueError:
        ids = []
    if ids and not _names_model(model, ids):
        shown = ", ".join(ids[:5]) + (", …" if len(ids) > 5 else "")
        return EndpointCheck("warn", f"{url} answered but does not list {model} (it lists {shown})")
    return EndpointCheck("ok", f"{url} answered" + (f" and lists {model}" if ids else ""))
