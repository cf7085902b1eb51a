"""What litellm raises, mapped to the adapter's error table (``llm.errors``, through ``map_error``).

Real litellm exceptions, built as litellm builds them; every row of the table in
``llm/adapter.py``'s docstring that an exception maps to is checked here, with its retry flag."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from jidocode.services.conversation.llm.adapter import load_litellm, map_error
from jidocode.shared.errors import JidoError

_MODEL = "openai/m"
_REQUEST = httpx.Request("POST", "http://127.0.0.1:9/v1/chat/completions")


def _response(status: int, headers: dict[str, str] | None = None) -> httpx.Response:
    return httpx.Response(status, headers=headers or {}, request=_REQUEST)


def _raised(name: str) -> BaseException:
    """One litellm exception of class ``name``, with the arguments litellm gives it."""
    lib = load_litellm()
    common: dict[str, Any] = {"message": "went wrong", "llm_provider": "openai", "model": _MODEL}
    made: dict[str, Any] = {
        "ContextWindowExceededError": lambda: lib.ContextWindowExceededError(**common),
        "AuthenticationError": lambda: lib.AuthenticationError(**common),
        "PermissionDeniedError": lambda: lib.PermissionDeniedError(**common, response=_response(403)),
        "NotFoundError": lambda: lib.NotFoundError(**common),
        "RateLimitError": lambda: lib.RateLimitError(**common, response=_response(429, {"retry-after": "7"})),
        "Timeout": lambda: lib.Timeout(**common),
        "BadRequestError": lambda: lib.BadRequestError(**common),
        "UnknownProvider": lambda: lib.BadRequestError(
            message="LLM Provider NOT provided", llm_provider="", model=_MODEL
        ),
        "InternalServerError": lambda: lib.InternalServerError(**common),
        "ServiceUnavailableError": lambda: lib.ServiceUnavailableError(**common),
        "BadGatewayError": lambda: lib.BadGatewayError(**common),
        "APIConnectionError": lambda: lib.APIConnectionError(**common),
        "APIError502": lambda: lib.APIError(status_code=502, **common),
        "APIError418": lambda: lib.APIError(status_code=418, **common),
    }
    exc: BaseException = made[name]()
    return exc


@pytest.mark.parametrize(
    ("raised", "error_type", "retryable"),
    [
        ("ContextWindowExceededError", "llm_context_overflow", False),
        ("AuthenticationError", "llm_auth", False),
        ("PermissionDeniedError", "llm_auth", False),
        ("NotFoundError", "llm_unknown_model", False),
        ("RateLimitError", "llm_rate_limited", True),
        ("Timeout", "llm_timeout", True),
        ("BadRequestError", "llm_bad_request", False),
        ("UnknownProvider", "llm_unknown_model", False),
        ("InternalServerError", "llm_unavailable", True),
        ("ServiceUnavailableError", "llm_unavailable", True),
        ("BadGatewayError", "llm_unavailable", True),
        ("APIConnectionError", "llm_unavailable", True),
        ("APIError502", "llm_unavailable", True),
        ("APIError418", "llm_error", False),
    ],
)
def test_each_litellm_failure_has_its_type_and_retry_flag(
    raised: str, error_type: str, retryable: bool
) -> None:
    error = map_error(_raised(raised), _MODEL)
    assert (error.type, error.retryable) == (error_type, retryable)
    assert error.details["model"] == _MODEL and error.details["exception"]
    assert _MODEL in error.message or "rejected" in error.message


def test_a_rate_limit_carries_the_providers_retry_after() -> None:
    error = map_error(_raised("RateLimitError"), _MODEL)
    assert error.details["retry_after_s"] == 7.0
    assert "retry_after_s" not in map_error(_raised("Timeout"), _MODEL).details


def test_anything_else_is_llm_error_and_a_jido_error_passes_through() -> None:
    error = map_error(RuntimeError("boom"), _MODEL)
    assert (error.type, error.retryable) == ("llm_error", False)
    assert "RuntimeError: boom" in error.message
    own = JidoError("already typed", error_type="llm_budget_exceeded")
    assert map_error(own, _MODEL) is own
