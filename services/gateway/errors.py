"""How errors become HTTP answers: ``{"error": {"type", "message", "details"}}`` with a status
chosen by the :class:`~jidocode.shared.errors.JidoError` type.

==========================================  ======
error type                                  status
==========================================  ======
``invalid_input``, ``invalid_envelope``,    400
``missing_data_envelope`` (and a body that
is not JSON, a bad id in the path)
``unauthorized``                            401
``permission_denied`` (and a cross-origin   403
state change, :mod:`.origin`)
``not_found``                               404
``conflict``                                409
``payload_too_large``                       413
``unsupported_media_type`` (a cookie-only   415
state change whose body is not JSON)
``validation_error`` (a body or query that  422
does not fit its schema)
``service_unavailable``, ``timeout``        503
anything else from a service                502
==========================================  ======
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError
from starlette.responses import Response

from jidocode.shared.errors import JidoError

from .middleware import error_body

__all__ = ["STATUS_BY_TYPE", "error_response", "from_jido_error", "from_validation_error"]

STATUS_BY_TYPE: dict[str, int] = {
    "invalid_input": 400,
    "invalid_envelope": 400,
    "missing_data_envelope": 400,
    "unauthorized": 401,
    "permission_denied": 403,
    "not_found": 404,
    "conflict": 409,
    "payload_too_large": 413,
    "unsupported_media_type": 415,
    "validation_error": 422,
    "service_unavailable": 503,
    "timeout": 503,
}


def error_response(error_type: str, message: str, details: dict[str, Any] | None = None) -> Response:
    return Response(
        error_body(error_type, message, details),
        status_code=STATUS_BY_TYPE.get(error_type, 502),
        media_type="application/json",
    )


def from_jido_error(exc: JidoError) -> Response:
    details = dict(exc.details)
    if exc.retryable:
        details["retryable"] = True
    return error_response(exc.type, exc.message, details)


def from_validation_error(exc: ValidationError, what: str) -> Response:
    """422 naming each field that was wrong (never echoing the input value back)."""
    problems = [
        {"field": ".".join(str(p) for p in err["loc"]) or what, "problem": err["msg"]} for err in exc.errors()
    ]
    first = problems[0] if problems else {"field": what, "problem": "invalid"}
    return error_response(
        "validation_error",
        f"invalid {what}: {first['field']}: {first['problem']}",
        {"errors": problems},
    )
