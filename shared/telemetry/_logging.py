"""Structured logs: JSON lines when stderr is not a terminal, with trace, span, project, conversation.

:class:`JsonFormatter` writes one JSON object a line: ``time``, ``level``,
``logger``, ``message``, ``service`` and, when known, ``trace_id``/``span_id``
(the current span's), ``project_id`` and ``conversation_id`` (set by the
endpoint middleware and the conversation actor through :func:`log_scope`), and
``exc`` (the traceback). :class:`TextFormatter` is the terminal's line with the
same ids appended. ``JIDO_LOG_FORMAT=json|text`` overrides the choice.
"""

from __future__ import annotations

import contextvars
import logging
import os
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, TextIO

import orjson

from ._switch import enabled

__all__ = ["JsonFormatter", "TextFormatter", "log_format", "log_scope", "make_formatter", "set_log_scope"]

_PROJECT: contextvars.ContextVar[str | None] = contextvars.ContextVar("jido_project", default=None)
_CONVERSATION: contextvars.ContextVar[str | None] = contextvars.ContextVar("jido_conversation", default=None)
_SERVICE: list[str] = [""]


def set_log_scope(project_id: str | None, conversation_id: str | None = None) -> None:
    """Name the project and conversation of what the current task logs from now on."""
    _PROJECT.set(project_id)
    _CONVERSATION.set(conversation_id)


@contextmanager
def log_scope(project_id: str | None, conversation_id: str | None = None) -> Iterator[None]:
    """Name the project and conversation of what the block logs."""
    p = _PROJECT.set(project_id)
    c = _CONVERSATION.set(conversation_id)
    try:
        yield
    finally:
        _PROJECT.reset(p)
        _CONVERSATION.reset(c)


def _ids() -> dict[str, str]:
    out: dict[str, str] = {}
    if enabled():  # OpenTelemetry is imported only once tracing is on
        from opentelemetry import trace as trace_api

        ctx = trace_api.get_current_span().get_span_context()
        if ctx.is_valid:
            out["trace_id"] = format(ctx.trace_id, "032x")
            out["span_id"] = format(ctx.span_id, "016x")
    p, c = _PROJECT.get(), _CONVERSATION.get()
    if p:
        out["project_id"] = p
    if c:
        out["conversation_id"] = c
    return out


class JsonFormatter(logging.Formatter):
    """One JSON object per record."""

    def format(self, record: logging.LogRecord) -> str:
        sec = int(record.created)
        out: dict[str, Any] = {
            "time": f"{time.strftime('%Y-%m-%dT%H:%M:%S', time.gmtime(sec))}.{int(record.msecs):03d}Z",
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        if _SERVICE[0]:
            out["service"] = _SERVICE[0]
        out.update(_ids())
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return orjson.dumps(out, default=str).decode()


class TextFormatter(logging.Formatter):
    """The terminal's line, with the ids appended in brackets when there are any."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        ids = _ids()
        if not ids:
            return line
        short = {k: (v[:16] if k == "trace_id" else v) for k, v in ids.items() if k != "span_id"}
        return f"{line} [{' '.join(f'{k}={v}' for k, v in short.items())}]"


def log_format(stream: TextIO | None = None) -> str:
    """``json`` or ``text``: ``JIDO_LOG_FORMAT`` when set, else text on a terminal, JSON otherwise.

    Raises ``ValueError`` for another value of ``JIDO_LOG_FORMAT``.
    """
    chosen = os.environ.get("JIDO_LOG_FORMAT", "").strip().lower()
    if chosen:
        if chosen not in ("json", "text"):
            raise ValueError(f"JIDO_LOG_FORMAT={chosen!r}: expected json or text")
        return chosen
    stream = stream or sys.stderr
    return "text" if stream.isatty() else "json"


def make_formatter(service: str = "", stream: TextIO | None = None) -> logging.Formatter:
    """The formatter for ``stream`` (stderr): JSON or text as :func:`log_format` decides."""
    if service:
        _SERVICE[0] = service
    return JsonFormatter() if log_format(stream) == "json" else TextFormatter()
