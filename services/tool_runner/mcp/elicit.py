"""An MCP server's elicitation (``elicitation/create``) as a question to the user, and back.

A server may ask the user something while one of its tools runs. The tool runner asks it
through the approval flow of the call that runs the tool (``conversation.approval.requested``
on the call's conversation, the answer on its input: ``services/tool_runner/approvals.py``),
so every client that answers approvals — the CLI, the SDK's ``approve`` callback, the console,
A2A's ``input-required`` — answers elicitations too. A form elicitation's ``requestedSchema``
goes with the question as its ``form``; an answer may fill it (``content``,
``shared/forms.py``), which is checked here against the form before anything reaches the server.

=========================================  ===========================================
the user's answer                          the server gets
=========================================  ===========================================
approve with content that fits the form    ``accept`` with that content
approve without content                    ``accept``, with the content :func:`fill` makes
approve with content that does not fit     ``cancel`` (nothing of it forwarded)
``deny``                                   ``decline``
no answer in time, call cancelled          ``cancel``
no conversation to ask                     ``cancel`` (nobody can answer)
=========================================  ===========================================

A form outside the MCP restriction (a flat object of primitives) is answered ``cancel`` without
asking, and so is an approve without content that a yes cannot fill (a required string with no
default): a yes would be a made-up answer. A URL elicitation asks whether to go on at that URL
(the question names it; the user opens it) and is accepted with no content. The question is
asked under the call's tool name, with the server's message in ``reason`` and the request in
``args`` (model and server text: untrusted, shown as text).

The pure part (:func:`question`, :func:`form_of`, :func:`fill`, :func:`result_of`) has no I/O;
the wiring is :data:`CURRENT_ASKER` (set by the connection around each call, so a callback finds
the call it belongs to) and :class:`Asker`.
"""

from __future__ import annotations

import contextvars
from collections.abc import Awaitable, Callable
from typing import Any, Final

import mcp_types as types

from jidocode.services.tool_runner.approvals import NO_CONVERSATION, Reply
from jidocode.shared.errors import InvalidInput
from jidocode.shared.forms import check_content, form_fields

__all__ = [
    "CURRENT_ASKER",
    "NO_ANSWER",
    "Asker",
    "answerable",
    "fill",
    "form_of",
    "question",
    "result_of",
]

#: ``ask(question_id, args, reason, form)`` → the user's answer (an approval decision, ``timeout``,
#: ``cancelled`` or ``no_conversation``, with the content given to ``form``), through the call's
#: approval flow.
Asker = Callable[[str, dict[str, Any], str, dict[str, Any] | None], Awaitable[Reply]]

#: The asker of the call that is running in this context (set around ``tools/call``).
CURRENT_ASKER: Final[contextvars.ContextVar[Asker | None]] = contextvars.ContextVar(
    "jidocode_mcp_asker", default=None
)
#: What a question nobody could answer is called (``cancel`` to the server).
NO_ANSWER: Final = NO_CONVERSATION

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


def form_of(params: types.ElicitRequestParams) -> dict[str, Any] | None:
    """The form an answer to ``params`` may fill (its ``requestedSchema``); ``None`` for a URL."""
    if isinstance(params, types.ElicitRequestURLParams):
        return None
    return dict(params.requested_schema)


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


def result_of(answer: Reply, params: types.ElicitRequestParams) -> types.ElicitResult:
    """What the server is told for the user's ``answer``; :class:`InvalidInput` naming the field
    when the answer's content does not fit the form (then nothing of it may be forwarded)."""
    if answer.decision in _ACCEPT:
        if isinstance(params, types.ElicitRequestURLParams):
            return types.ElicitResult(action="accept")
        schema = dict(params.requested_schema)
        content = fill(schema) if answer.content is None else check_content(schema, answer.content)
        if content is None:
            return types.ElicitResult(action="cancel")
        return types.ElicitResult(action="accept", content=content)
    if answer.decision == "deny":
        return types.ElicitResult(action="decline")
    return types.ElicitResult(action="cancel")


def answerable(params: types.ElicitRequestParams) -> bool:
    """Whether the user could answer ``params``: a URL, or a form within the MCP restriction."""
    if isinstance(params, types.ElicitRequestURLParams):
        return True
    try:
        form_fields(dict(params.requested_schema))
    except InvalidInput:
        return False
    return True
