"""Pure mappings between JidoCode's tool contract and MCP's: no I/O, no SDK session.

* :func:`tool_to_mcp`: a :class:`ToolSpec` of the project's catalogue → an MCP ``Tool``
  (input schema, the output schema when it is an object schema, annotations from its safety).
* :func:`result_to_mcp`: a :class:`ToolResult` → a ``CallToolResult`` (text, structured
  content, ``isError``: an error is text, its details in ``_meta``, never structured content
  that the tool's output schema would reject); a call the policy wanted to *ask* about in a client that cannot
  be asked becomes the message :func:`ask_refusal` writes.
* :data:`APPROVAL_SCHEMA` and :func:`approval_decision`: the elicitation form an ``ask``
  becomes, and the decision its answer is; :func:`question_form` and :func:`answer_to`: the
  same for any question, an MCP server's own form included (its fields asked as they are).
* :func:`skill_resource`, :func:`command_prompt`: assets as resources and prompts.
"""

from __future__ import annotations

import json
from typing import Any, Final, Literal

import mcp_types as types

from jidocode.client import ApprovalAnswer, ApprovalRequest
from jidocode.shared.events.tools import ToolResult, ToolSpec
from jidocode.shared.plugins import MCP_PREFIX

__all__ = [
    "APPROVAL_SCHEMA",
    "ERROR_META_KEY",
    "SKILL_URI_PREFIX",
    "answer_to",
    "approval_decision",
    "approval_message",
    "ask_refusal",
    "asked_rule",
    "command_prompt",
    "error_result",
    "question_form",
    "result_to_mcp",
    "skill_name",
    "skill_resource",
    "tool_to_mcp",
]

#: The ``_meta`` key of an error result's machine-readable details (``{"error": <type>, …}``).
ERROR_META_KEY: Final = "jidocode/error"

#: Resources of the project's skills are ``jidocode://skills/<name>``.
SKILL_URI_PREFIX: Final = "jidocode://skills/"

#: The elicitation form of an ``ask``: one yes/no question. ``approve_session`` is never
#: offered: one server may serve several clients of a project (decision 0202).
APPROVAL_SCHEMA: Final[types.ElicitRequestedSchema] = {
    "type": "object",
    "properties": {
        "approve": {
            "type": "boolean",
            "title": "Approve",
            "description": "Run this tool call once",
        }
    },
    "required": ["approve"],
}


def tool_to_mcp(spec: ToolSpec) -> types.Tool:
    """The MCP tool of ``spec``: its input schema (an empty object schema when it has none),
    its output schema only when it describes an object (MCP allows no other), its safety
    as annotations."""
    input_schema: dict[str, Any] = dict(spec.input_schema) or {"type": "object", "properties": {}}
    input_schema.setdefault("type", "object")
    output = spec.output_schema if spec.output_schema.get("type") == "object" else None
    safety = spec.safety
    return types.Tool(
        name=spec.name,
        description=spec.description or None,
        input_schema=input_schema,
        output_schema=dict(output) if output is not None else None,
        annotations=types.ToolAnnotations(
            read_only_hint=safety.read_only,
            destructive_hint=safety.destructive and not safety.read_only,
            idempotent_hint=safety.idempotent,
            open_world_hint=safety.open_world,
        ),
    )


def _text(value: Any) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, default=str)


def error_result(text: str, /, **details: Any) -> types.CallToolResult:
    """An ``isError`` result: ``text`` says what went wrong, ``details`` (the error's type …)
    ride in ``_meta`` under :data:`ERROR_META_KEY`.

    Never ``structuredContent``: a client checks it against the tool's ``outputSchema``, which
    describes a success (the JS SDK then throws ``-32602`` and the message is lost; decision 0331).
    """
    result = types.CallToolResult(content=[types.TextContent(text=text)], is_error=True)
    if details:
        result.meta = {ERROR_META_KEY: details}
    return result


def asked_rule(result: ToolResult) -> str | None:
    """The rule that asked, when ``result`` is the runner's refusal of an ``ask`` it had nobody
    to ask about (``permission_denied`` with ``details.decision == "ask"``); else ``None``."""
    error = result.error
    if result.ok or error is None or error.type != "permission_denied":
        return None
    if error.details.get("decision") != "ask":
        return None
    rule = error.details.get("rule")
    return str(rule) if rule else 'the project\'s default ("default": "ask")'


def ask_refusal(tool: str, result: ToolResult) -> str:
    """What a client without elicitation reads when the policy asked about its call."""
    rule = asked_rule(result) or "an ask rule"
    reason = result.error.message if result.error is not None else ""
    why = reason.split(": ", 1)[1] if ": " in reason else reason
    return (
        f"{tool} needs approval: {rule} asks ({why}). This MCP client does not support "
        "elicitation, so nobody can approve the call here; allow it in the project's "
        "settings.json (permissions.allow) or use a client that supports elicitation."
    )


def result_to_mcp(tool: str, result: ToolResult) -> types.CallToolResult:
    """The MCP result of a tool call: the data as text (as is when a string, else JSON) and,
    when it is an object, as structured content (an MCP server's tool: the server's own text and
    structured content, which its output schema describes); a failed call is ``isError`` with
    the error's type and message."""
    if result.ok:
        data = result.data
        structured = data if isinstance(data, dict) else None
        if tool.startswith(MCP_PREFIX) and isinstance(data, dict):
            # an MCP server's tool, listed with the server's own output schema: its text and
            # structured content as the server gave them (the runner keeps both in ``data``)
            data, structured = data.get("text", ""), data.get("structured")
        return types.CallToolResult(
            content=[types.TextContent(text=_text(data if data is not None else ""))],
            structured_content=structured,
            is_error=False,
        )
    if asked_rule(result) is not None:
        return error_result(ask_refusal(tool, result), error="approval_needed", rule=asked_rule(result))
    error = result.error
    if error is None:
        return error_result(f"{tool} failed without an error")
    return error_result(
        f"{tool} failed ({error.type}): {error.message}",
        error=error.type,
        message=error.message,
        details=error.details,
    )


def approval_message(tool: str, args: dict[str, Any], reason: str) -> str:
    """The question an ``ask`` shows the user."""
    shown = json.dumps(args, ensure_ascii=False, default=str)
    if len(shown) > 500:
        shown = shown[:500] + "…"
    return f"JidoCode asks before running {tool} {shown}: {reason or 'an ask rule matched'}. Approve it once?"


def approval_decision(result: types.ElicitResult | Any) -> Literal["approve_once", "deny"]:
    """The decision an elicitation's answer is: ``approve_once`` only for an accepted form whose
    ``approve`` is true; a decline, a cancel, a false, anything else denies."""
    if not isinstance(result, types.ElicitResult) or result.action != "accept":
        return "deny"
    return "approve_once" if (result.content or {}).get("approve") is True else "deny"


def question_form(question: ApprovalRequest) -> tuple[str, types.ElicitRequestedSchema]:
    """The message and the form the client is asked: an MCP server's own form as the server wrote
    it (its text is untrusted: the client shows it as data), else the yes/no of an ``ask``."""
    if question.form is not None:
        return question.reason, question.form  # type: ignore[return-value]  # checked by the runner
    return approval_message(question.tool, question.args, question.reason), APPROVAL_SCHEMA


def answer_to(question: ApprovalRequest, result: types.ElicitResult | Any) -> ApprovalAnswer:
    """The answer the client's ``result`` gives ``question``: a form's values with an accept
    (checked against the form by the SDK before they are sent), else the yes/no's decision;
    a decline, a cancel, anything else denies."""
    if question.form is None:
        return ApprovalAnswer(decision=approval_decision(result))
    if not isinstance(result, types.ElicitResult) or result.action != "accept":
        return ApprovalAnswer(decision="deny")
    return ApprovalAnswer(decision="approve_once", content=dict(result.content or {}))


def skill_resource(item: dict[str, Any]) -> types.Resource:
    """The resource of a skill summary (``AssetsClient.list("skill")``)."""
    name = str(item["name"])
    return types.Resource(
        uri=SKILL_URI_PREFIX + name,
        name=name,
        description=str(item.get("description") or "") or None,
        mime_type="text/markdown",
    )


def skill_name(uri: str) -> str | None:
    """The skill a resource URI names, or ``None`` when it names none."""
    if not uri.startswith(SKILL_URI_PREFIX):
        return None
    name = uri[len(SKILL_URI_PREFIX) :]
    return name or None


def command_prompt(asset: dict[str, Any]) -> types.Prompt:
    """The prompt of a slash command (``AssetsClient.get("command", name).asset``)."""
    arguments = [
        types.PromptArgument(
            name=str(arg["name"]),
            description=arg.get("description") or None,
            required=bool(arg.get("required")),
        )
        for arg in asset.get("arguments") or []
    ]
    if not arguments and asset.get("argument_hint"):
        arguments = [
            types.PromptArgument(name="arguments", description=str(asset["argument_hint"]), required=False)
        ]
    return types.Prompt(
        name=str(asset["name"]),
        description=str(asset.get("description") or "") or None,
        arguments=arguments or None,
    )
