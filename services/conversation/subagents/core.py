"""The pure rules of sub-agents: the ``task`` tool, limits, the child's id and tools, its outcome.

No I/O here; :mod:`.runner` does the bus work around these.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from typing import Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from jidocode.services.conversation.ports import LlmToolSpec
from jidocode.shared.events.conversation import TurnEnded
from jidocode.shared.tools import BUILTIN_SPECS

from .templates import Templates

__all__ = [
    "NO_TOOLS",
    "REF_KEY",
    "TASK_TOOL",
    "Outcome",
    "Refusal",
    "SubagentRef",
    "SubagentSettings",
    "TaskArgs",
    "check_start",
    "child_conversation_id",
    "child_settings",
    "child_tools",
    "outcome_of",
    "parse_task_args",
    "task_spec",
]

#: The tool's name, as the model sees it (Claude Code calls it ``Task``).
TASK_TOOL: Final = "task"
#: Key of the parent reference in a child conversation's settings.
REF_KEY: Final = "subagent"
#: ``expose`` list that shows no tool at all (an empty list would mean "every tool").
NO_TOOLS: Final = ("",)


class SubagentSettings(BaseModel):
    """Limits of sub-agents (environment ``JIDO_CONV_SUBAGENTS_*``), validated at construction."""

    model_config = ConfigDict(frozen=True)

    #: Offer the ``task`` tool at all.
    enabled: bool = True
    #: Children of one conversation running at once.
    max_per_conversation: int = Field(default=4, ge=1, le=64)
    #: Sub-agents running at once in one project, over every conversation and replica.
    max_per_project: int = Field(default=16, ge=1, le=1024)
    #: Nesting: a top-level conversation is depth 0, its children depth 1, ...
    max_depth: int = Field(default=2, ge=1, le=8)
    #: A child that has not finished after this long is cancelled and the call fails.
    timeout_s: float = Field(default=1800.0, gt=0.0, le=7 * 24 * 3600.0)
    #: Longest ``prompt`` the model may hand over (characters).
    max_prompt_chars: int = Field(default=100_000, ge=1, le=1_000_000)
    #: Longest child answer returned to the parent (characters; the rest is cut with a marker).
    max_result_chars: int = Field(default=64 * 1024, ge=64, le=1_000_000)


class TaskArgs(BaseModel):
    """The ``task`` tool's input, as Claude Code's ``Task`` tool takes it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    description: str = Field(min_length=1, max_length=200)
    prompt: str = Field(min_length=1)
    subagent_type: str = ""


class SubagentRef(BaseModel):
    """A child's reference to its parent, kept in its settings under :data:`REF_KEY`."""

    model_config = ConfigDict(frozen=True)

    parent_conversation_id: str
    request_id: str
    depth: int = Field(ge=1)
    template: str = ""


class Refusal(BaseModel):
    """Why a ``task`` call does not start (a tool error the model reads)."""

    model_config = ConfigDict(frozen=True)

    error_type: str
    message: str
    details: dict[str, Any] = Field(default_factory=dict)


class Outcome(BaseModel):
    """How a child ended."""

    model_config = ConfigDict(frozen=True)

    status: Literal["completed", "failed", "cancelled"]
    result: str = ""
    error_type: str = ""
    message: str = ""


def depth_of(settings: Mapping[str, Any]) -> int:
    """A conversation's depth: 0 unless its settings carry a parent reference."""
    raw = settings.get(REF_KEY)
    if not isinstance(raw, Mapping):
        return 0
    try:
        return SubagentRef.model_validate(raw).depth
    except ValidationError:
        return 0


def parse_task_args(args: Mapping[str, Any], settings: SubagentSettings) -> TaskArgs | Refusal:
    try:
        parsed = TaskArgs.model_validate(dict(args))
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc']) or 'input'}: {err['msg']}" for err in exc.errors()
        )
        return Refusal(
            error_type="invalid_task_args",
            message=f"the task call is malformed ({problems}); it takes description, prompt and subagent_type",
            details={"problems": problems},
        )
    if len(parsed.prompt) > settings.max_prompt_chars:
        return Refusal(
            error_type="invalid_task_args",
            message=f"the task prompt has {len(parsed.prompt)} characters; at most {settings.max_prompt_chars} are allowed",
            details={"prompt_chars": len(parsed.prompt), "max_prompt_chars": settings.max_prompt_chars},
        )
    return parsed


def check_start(*, parent_depth: int, running_here: int, settings: SubagentSettings) -> Refusal | None:
    """The depth and per-conversation limits (the per-project one needs the cluster's slots)."""
    if parent_depth + 1 > settings.max_depth:
        return Refusal(
            error_type="subagent_depth_exceeded",
            message=(
                f"sub-agents may nest {settings.max_depth} deep and this conversation is at depth "
                f"{parent_depth}: do this task yourself"
            ),
            details={"depth": parent_depth, "max_depth": settings.max_depth},
        )
    if running_here >= settings.max_per_conversation:
        return Refusal(
            error_type="subagent_quota_exceeded",
            message=(
                f"at most {settings.max_per_conversation} sub-agents may run at once per conversation "
                f"and {running_here} are running: wait for one to finish, or do this task yourself"
            ),
            details={
                "scope": "conversation",
                "running": running_here,
                "limit": settings.max_per_conversation,
            },
        )
    return None


def project_quota_refusal(limit: int) -> Refusal:
    return Refusal(
        error_type="subagent_quota_exceeded",
        message=(
            f"at most {limit} sub-agents may run at once in this project and all are busy: "
            "wait for one to finish, or do this task yourself"
        ),
        details={"scope": "project", "limit": limit},
    )


def child_conversation_id(parent_id: str, request_id: str) -> str:
    """The child's conversation id: the same for the same tool call (a re-run after a crash
    finds the same child), a subject token (``[A-Za-z0-9_-]``, at most 128 characters)."""
    digest = hashlib.sha256(f"{parent_id}\x00{request_id}".encode()).hexdigest()[:20]
    return f"{parent_id[:96]}-sa-{digest}"


#: Claude Code's tool names in a template's ``tools``, as the tools they stand for here (an
#: agent file written for Claude Code narrows the child the same way; others match nothing).
CLAUDE_TOOL_NAMES: Final[Mapping[str, tuple[str, ...]]] = {
    **{name: (t.name,) for t in BUILTIN_SPECS for name in t.agent_names},
    "Task": ("task",),
}


def child_tools(template_tools: Sequence[str] | None, parent_offered: Sequence[str]) -> list[str]:
    """What the child is offered: the template's list (Claude Code's names mapped to ours)
    within the parent's (never more)."""
    if template_tools is None:
        return list(parent_offered)
    allowed = {tool for name in template_tools for tool in CLAUDE_TOOL_NAMES.get(name, (name,))}
    return [name for name in parent_offered if name in allowed]


def child_settings(
    parent_settings: Mapping[str, Any],
    *,
    ref: SubagentRef,
    system_prompt: str,
    tools: Sequence[str],
    model: str | None,
) -> dict[str, Any]:
    """The child's start settings: the parent's LLM settings, its own prompt, tools and reference."""
    out = {k: v for k, v in parent_settings.items() if k not in ("tools", "system_prompt", REF_KEY)}
    out["system_prompt"] = system_prompt
    out["tools"] = {"expose": list(tools) or list(NO_TOOLS)}
    out[REF_KEY] = ref.model_dump(mode="json")
    if model:
        out["model"] = model
    return out


def task_spec(templates: Templates) -> LlmToolSpec:
    """The ``task`` tool as the model sees it, listing the agent types it may name."""
    lines = []
    for name in templates.names():
        template = templates.get(name)
        if template is not None:
            lines.append(f"- {name}: {template.description or '(no description)'}")
    return LlmToolSpec(
        name=TASK_TOOL,
        description=(
            "Hand a self-contained task to a sub-agent: a separate conversation with its own context "
            "that works with its own tools and returns one final report as this tool's result. "
            "Several task calls in one answer run in parallel. The prompt must say everything the "
            "sub-agent needs: it does not see this conversation. Agent types (subagent_type):\n"
            + "\n".join(lines)
        ),
        input_schema={
            "type": "object",
            "properties": {
                "description": {
                    "type": "string",
                    "description": "A short (3-5 word) description of the task",
                },
                "prompt": {"type": "string", "description": "The task for the sub-agent to perform"},
                "subagent_type": {
                    "type": "string",
                    "description": "The type of agent to use (default general-purpose)",
                    "enum": templates.names(),
                },
            },
            "required": ["description", "prompt"],
            "additionalProperties": False,
        },
    )


def outcome_of(entry_type: str, data: Mapping[str, Any]) -> Outcome | None:
    """The child's outcome if the timeline entry ``entry_type``/``data`` ends its task, else ``None``.

    A child is given one message: its conversation's first :class:`TurnEnded` ends the task
    (decision 0317); a completed turn's answer is its result.
    """
    ended = TurnEnded.read(data) if entry_type == TurnEnded.TYPE else None
    if ended is None:
        return None
    match ended.outcome:
        case "completed":
            return Outcome(status="completed", result=ended.text)
        case "cancelled":
            why = "" if ended.message in ("", "cancelled") else f": {ended.message}"
            return Outcome(
                status="cancelled", error_type="cancelled", message=f"the sub-agent was cancelled{why}"
            )
        case "stopped":
            return Outcome(
                status="failed",
                error_type=ended.error_type or "loop_stopped",
                message=f"the sub-agent stopped without an answer after {ended.turns} model calls "
                f"({ended.error_type})",
            )
        case _:
            return Outcome(
                status="failed",
                error_type=ended.error_type or "llm_error",
                message=ended.message or "the sub-agent's model call failed",
            )


def cap_result(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    return text[:limit] + f"\n[... cut: the sub-agent's answer had {len(text)} characters, {limit} are kept]"
