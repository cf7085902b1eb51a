"""Errors of JidoCode, and how they cross the bus as data.

Error tree (every class carries ``type``, ``message``, ``retryable``, ``details``)::

    JidoError
    ├── InvalidEnvelope        invalid_envelope        a message that is not a valid CloudEvent
    │   └── MissingDataEnvelope missing_data_envelope  a payload that is not inside ``data``
    ├── InvalidInput           invalid_input           a well-formed event with bad content
    ├── NotFound               not_found               unknown project, conversation, tool, asset
    ├── Conflict               conflict                the request clashes with current state
    ├── PayloadTooLarge        payload_too_large       over a configured size limit
    ├── PermissionDenied       permission_denied       the policy refused
    ├── ServiceUnavailable     service_unavailable     nobody answers the subject (retryable)
    ├── RequestTimeout         timeout                 an answer did not come in time (retryable)
    └── RemoteError            <any other type>        an error event of a type not listed here

Errors are values: a failed request replies with an error event whose data is
:class:`ErrorInfo`, and :func:`from_info` turns it back into the right class.
"""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field

__all__ = [
    "Conflict",
    "ErrorInfo",
    "InvalidEnvelope",
    "InvalidInput",
    "JidoError",
    "MissingDataEnvelope",
    "NotFound",
    "PayloadTooLarge",
    "PermissionDenied",
    "RemoteError",
    "RequestTimeout",
    "ServiceUnavailable",
    "StorageFull",
    "from_info",
]


class ErrorInfo(BaseModel):
    """The data of an ``error`` event: what went wrong, as a value."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    type: str
    message: str
    retryable: bool = False
    details: dict[str, Any] = Field(default_factory=dict)


class JidoError(Exception):
    """Base of every JidoCode error; convertible to and from :class:`ErrorInfo`."""

    error_type: ClassVar[str] = "error"
    default_retryable: ClassVar[bool] = False

    def __init__(
        self,
        message: str,
        *,
        details: dict[str, Any] | None = None,
        retryable: bool | None = None,
        error_type: str | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.details: dict[str, Any] = dict(details or {})
        self.retryable = self.default_retryable if retryable is None else retryable
        self.type = error_type or self.error_type

    def to_info(self) -> ErrorInfo:
        return ErrorInfo(type=self.type, message=self.message, retryable=self.retryable, details=self.details)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.type!r}, {self.message!r})"


class InvalidEnvelope(JidoError):
    error_type = "invalid_envelope"


class MissingDataEnvelope(InvalidEnvelope):
    error_type = "missing_data_envelope"


class InvalidInput(JidoError):
    error_type = "invalid_input"


class NotFound(JidoError):
    error_type = "not_found"


class Conflict(JidoError):
    error_type = "conflict"


class PayloadTooLarge(JidoError):
    error_type = "payload_too_large"


class PermissionDenied(JidoError):
    error_type = "permission_denied"


class ServiceUnavailable(JidoError):
    error_type = "service_unavailable"
    default_retryable = True


class RequestTimeout(JidoError):
    error_type = "timeout"
    default_retryable = True


class StorageFull(JidoError):
    """The NATS store's disk has no room: a write was refused or never acknowledged. It works
    again once space is freed there (retryable: nothing already accepted is lost)."""

    error_type = "storage_full"
    default_retryable = True


class RemoteError(JidoError):
    """An error event whose type has no class of its own here."""


_BY_TYPE: dict[str, type[JidoError]] = {
    cls.error_type: cls
    for cls in (
        InvalidEnvelope,
        MissingDataEnvelope,
        InvalidInput,
        NotFound,
        Conflict,
        PayloadTooLarge,
        PermissionDenied,
        ServiceUnavailable,
        RequestTimeout,
        StorageFull,
    )
}


def from_info(info: ErrorInfo) -> JidoError:
    """Rebuild the typed exception an error event stands for."""
    cls = _BY_TYPE.get(info.type, RemoteError)
    return cls(info.message, details=info.details, retryable=info.retryable, error_type=info.type)
