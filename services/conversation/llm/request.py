"""What one litellm call sends, and the usage a streamed chunk reports: pure functions."""

from __future__ import annotations

from typing import Any

from jidocode.services.conversation.ports import LlmRequest, LlmTokenUsage

from .options import LlmOptions

__all__ = ["completion_kwargs", "tools_param", "usage_of"]


def completion_kwargs(options: LlmOptions, api_key: str | None, request: LlmRequest) -> dict[str, Any]:
    """The keyword arguments of ``litellm.acompletion`` for one attempt of ``request``."""
    kwargs: dict[str, Any] = {
        "model": options.model,
        "messages": _own_copy(request.messages),
        "stream": True,
        "stream_options": {"include_usage": True},
        "timeout": options.timeout_s,
        # Retries are ours (visible, bounded); the provider SDK must not add its own.
        "max_retries": 0,
        # Our tools are plain functions, never litellm's MCP gateway; without this
        # litellm imports its proxy's MCP handler (and the optional ``mcp`` package)
        # on every call that has tools.
        "_skip_mcp_handler": True,
    }
    optional = {
        "api_base": options.api_base or None,
        "api_key": api_key,
        "temperature": options.temperature,
        "max_tokens": options.max_tokens,
        "tools": tools_param(request, options) or None,
    }
    kwargs.update({k: v for k, v in optional.items() if v is not None})
    return kwargs


def _own_copy(value: Any) -> Any:
    """A copy of JSON-shaped ``value``: the messages are shared with the conversation's
    projection, and the provider SDK is free to change what it is given."""
    if isinstance(value, dict):
        return {k: _own_copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_own_copy(v) for v in value]
    return value


def tools_param(request: LlmRequest, options: LlmOptions) -> list[dict[str, Any]]:
    return [
        {
            "type": "function",
            "function": {"name": t.name, "description": t.description, "parameters": t.input_schema},
        }
        for t in request.tools
        if options.tools.shown(t.name)
    ]


def usage_of(raw: Any) -> LlmTokenUsage | None:
    if raw is None:
        return None
    prompt = int(getattr(raw, "prompt_tokens", 0) or 0)
    completion = int(getattr(raw, "completion_tokens", 0) or 0)
    details = getattr(raw, "prompt_tokens_details", None)
    cached = int(getattr(details, "cached_tokens", 0) or 0) if details is not None else 0
    total = int(getattr(raw, "total_tokens", 0) or 0) or prompt + completion
    return LlmTokenUsage(
        prompt_tokens=prompt, completion_tokens=completion, cached_tokens=cached, total_tokens=total
    )
