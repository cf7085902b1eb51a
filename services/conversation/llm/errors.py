"""What litellm raised, as a typed ``JidoError`` (the table is in :mod:`.adapter`'s docstring).

litellm itself is passed in (``lib``): only the adapter imports it. A refusal (the request can
never succeed as it is) is never retried; a transient failure (rate limit, timeout, 5xx,
connection) is ``retryable``, a rate limit with the provider's ``Retry-After``.
"""

from __future__ import annotations

from typing import Any

from jidocode.shared.errors import JidoError

__all__ = ["litellm_error"]

#: (error type, message, retryable) of a mapped exception.
_Mapped = tuple[str, str, bool]


def litellm_error(exc: BaseException, model: str, lib: Any) -> JidoError:
    """Turn what litellm (``lib``) raised during a call to ``model`` into a typed ``JidoError``."""
    if isinstance(exc, JidoError):
        return exc
    message = str(getattr(exc, "message", None) or exc)
    details: dict[str, Any] = {"model": model, "exception": type(exc).__name__}
    status = getattr(exc, "status_code", None)
    if isinstance(status, int):
        details["status"] = status
    error_type, text, retryable = (
        _refusal(exc, lib, model, message)
        or _transient(exc, lib, model, message, status)
        or ("llm_error", f"the call to {model} failed: {type(exc).__name__}: {message}", False)
    )
    retry_after = _retry_after(exc) if error_type == "llm_rate_limited" else None
    if retry_after is not None:
        details["retry_after_s"] = retry_after
    return JidoError(text, error_type=error_type, retryable=retryable, details=details)


def _refusal(exc: BaseException, lib: Any, model: str, message: str) -> _Mapped | None:
    """A failure retrying cannot mend: overflow, a refused key, an unknown model, a bad request."""
    if isinstance(exc, lib.ContextWindowExceededError):
        return (
            "llm_context_overflow",
            f"the conversation no longer fits the context window of {model}: {message}",
            False,
        )
    if isinstance(exc, (lib.AuthenticationError, lib.PermissionDeniedError)):
        return (
            "llm_auth",
            f"the provider refused the API key for {model} (check llm.api_key_env): {message}",
            False,
        )
    if isinstance(exc, lib.NotFoundError):
        return "llm_unknown_model", f"unknown model {model!r}: {message}", False
    if isinstance(exc, lib.RateLimitError | lib.Timeout) or not isinstance(exc, lib.BadRequestError):
        return None
    if "llm provider not provided" in message.lower() or isinstance(exc, lib.LiteLLMUnknownProvider):
        return (
            "llm_unknown_model",
            f"litellm does not know the model {model!r}: use a provider prefix such as "
            f"openai/…, anthropic/…, ollama/…",
            False,
        )
    return "llm_bad_request", f"the provider rejected the request: {message}", False


def _transient(exc: BaseException, lib: Any, model: str, message: str, status: object) -> _Mapped | None:
    """A failure worth retrying: a rate limit, a timeout, a 5xx or a lost connection."""
    if isinstance(exc, lib.RateLimitError):
        return "llm_rate_limited", f"rate limited by the provider of {model}: {message}", True
    if isinstance(exc, lib.Timeout):
        return "llm_timeout", f"{model} did not answer in time: {message}", True
    unavailable = (
        lib.InternalServerError,
        lib.ServiceUnavailableError,
        lib.BadGatewayError,
        lib.APIConnectionError,
    )
    if isinstance(exc, unavailable) or (
        isinstance(exc, lib.APIError) and isinstance(status, int) and status >= 500
    ):
        return "llm_unavailable", f"the provider of {model} failed transiently: {message}", True
    return None


def _retry_after(exc: BaseException) -> float | None:
    """The provider's ``Retry-After`` in seconds, wherever litellm kept the headers."""
    candidates = (
        getattr(exc, "litellm_response_headers", None),
        getattr(exc, "headers", None),
        getattr(getattr(exc, "response", None), "headers", None),
    )
    for headers in candidates:
        if headers is None:
            continue
        value = headers.get("retry-after")
        if value is None:
            continue
        try:
            return float(value)
        except (TypeError, ValueError):
            return None
    return None
