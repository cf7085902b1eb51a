"""An MCP server's elicitation (``elicitation/create``) as a question to the user, and back.

A server may ask the user something while one of its tools runs. The tool runner asks it
through the approval flow of the call that runs the tool (``conversation.approval.requested``
on the call's conversation, the answer on its input: ``services/tool_runner/approvals.py``),
so every client that answers approvals — the CLI, the SDK's ``approve`` callback, the console,
A2A's ``input-required`` — answers elicitations too, with nothing new to learn.

An approval is a yes or a no, so the answer maps onto the elicitation as:

=========================================  ===========================================
the user's answer                          the server gets
=========================================  ===========================================
``approve_once`` / ``approve_session``     ``accept``, with the content :func:`fill` makes
``deny``                                   ``decline``
no answer in time, call cancelled          ``cancel``
no conversation to ask                     ``cancel`` (nobody can answer)
=========================================  ===========================================

A form whose required fields a yes cannot fill (a required string with no default) is
answered ``cancel`` without asking: a yes would be a made-up answer. A URL elicitation asks
whether to go on at that URL (the question names it; the user opens it) and is accepted with no
content. The question is asked under the call's tool name, with the server's message in
``reason`` and the request in ``args`` (model and server text: untrusted, shown as text).

The pure part (:func:`question`, :func:`fill`, :func:`result_of`) has no I/O; the wiring is
:data:`CURRENT_ASKER` (set by the connection around each call, so a callback finds the call it
belongs to) and :class:`Asker`.
"""

from __future__ import annotations

import contextvars
from collections.abc import Awaitable, Callable
from typing import Any, Final

import mcp_types as types

__all__ = [
    "CURRENT_ASKER",
    "NO_ANSWER",
    "Asker",
    "answerable",
    "fill",
    "question",
    "result_of",
]

#: ``ask(question_id, args, reason)`` → the user's answer (an approval decision, ``timeout``,
#: ``cancelled`` or ``no_conversation``), through the call's approval flow.
Asker = Callable[[str, dict[str, Any], str], Awaitable[str]]

#: The asker of the call that is running in this context (set around ``tools/call``).
CURRENT_ASKER: Final[contextvars.ContextVar[Asker | None]] = contextvars.ContextVar(
    "jidocode_mcp_asker", default=None
)
#: What a question nobody could answer is called (``cancel`` to the server).
NO_ANSWER: Final = "no_conversation"

_ACCEPT: Final = frozenset({"approve_once", "approve_session"})
#: A message or URL quoted in a question is cut to this many characters.
_MAX_TEXT: Final = 2000


def question(server: str, params: types.ElicitRequestParams) -> tuple[dict[str, Any], str]:
    """The approval question's ``args`` and ``reason`` for an elicitation of ``server``."""
    message = params.message[:_MAX_TEXT]
    if isinstance(params, types.ElicitRequestURLParams):
        url = params.url[:_MAX_TEXT]
        args: dict[str, Any] = {"elicitation": "url", "server": server, "message": message, "url": url}
        return args, f"MCP server {server!r} asks you to continue at {url}: {message}"
    schema = dict(params.requested_schema)
    args = {"elicitation": "form", "server": server, "message": message, "schema": schema}
    return args, f"MCP server {server!r} asks: {message}"


def fill(schema: dict[str, Any]) -> dict[str, Any] | None:
    """The content a yes gives the form ``schema``: each field's ``default``; a lone required
    boolean is ``true``; ``None`` when a required field is left that a yes cannot fill."""
    props = schema.get("properties")
    props = props if isinstance(props, dict) else {}
    required = [r for r in schema.get("required", []) if isinstance(r, str)]
    content = {
        name: spec["default"] for name, spec in props.items() if isinstance(spec, dict) and "default" in spec
    }
    missing = [name for name in required if name not in content]
    if len(missing) == 1 and len(required) == 1 and _is_boolean(props.get(missing[0])):
        content[missing[0]] = True
        missing = []
    return None if missing else content


def _is_boolean(spec: Any) -> bool:
    return isinstance(spec, dict) and spec.get("type") == "boolean"


def result_of(answer: str, params: types.ElicitRequestParams) -> types.ElicitResult:
    """What the server is told for the user's ``answer``."""
    if answer in _ACCEPT:
        if isinstance(params, types.ElicitRequestURLParams):
            return types.ElicitResult(action="accept")
        content = fill(dict(params.requested_schema))
        if content is None:
            return types.ElicitResult(action="cancel")
        return types.ElicitResult(action="accept", content=content)
    if answer == "deny":
        return types.ElicitResult(action="decline")
    return types.ElicitResult(action="cancel")


def answerable(params: types.ElicitRequestParams) -> bool:
    """Whether a yes could answer ``params`` (a URL, or a form :func:`fill` can fill)."""
    return isinstance(params, types.ElicitRequestURLParams) or fill(dict(params.requested_schema)) is not None
