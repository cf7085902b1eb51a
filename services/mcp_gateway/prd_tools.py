"""The PRD tools: ``prd_list``, ``prd_status``, ``prd_run``, ``prd_pause`` (issue 28, point 5).

Another agent reaches the project's PRD loops through these, as a user does with
``jidocode prd``: every call goes through the typed :class:`PrdClient`, nothing reads the
project's files here. They stand under the project's policy like any tool of this server:

* ``tools/list`` shows one only when the policy could allow or ask it (:func:`tool_exposed`);
* ``tools/call`` is decided by the project's effective policy (its rules as the project
  service reports them, so an untrusted project's own rules do not count) with the one pure
  :func:`authorize` of ``shared/policy``, each tool by its name: allow it with
  ``"prd_run"`` (…) in ``permissions.allow``. A ``deny`` is a text error naming the rule or
  the default and how to change it, an ``ask`` is put to the user when the client can be
  asked over its back channel, and refused naming the rule otherwise. Under the starter
  permissions (no settings) an untrusted project's PRD tools are denied as its other tools
  are, a trusted one's ask.

Errors are text (decision 0331): ``isError``, the message in ``content``, the type in
``_meta["jidocode/error"]``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, Final

import mcp_types as types
from pydantic import BaseModel, ConfigDict, Field

from jidocode.shared.clients import PrdClient, ProjectClient
from jidocode.shared.errors import JidoError
from jidocode.shared.events.prd import LoopInfo, PrdList, PrdView
from jidocode.shared.events.tools import ToolPolicy
from jidocode.shared.policy import Decision, Effect, InvalidRule, Policy, authorize, tool_exposed
from jidocode.shared.settings import global_home
from jidocode.shared.trust import is_trusted

from .chat import parse_args
from .mapping import APPROVAL_SCHEMA, approval_decision, approval_message, error_result

__all__ = [
    "PRD_TOOLS",
    "PRD_TOOL_NAMES",
    "Asker",
    "PrdNameArgs",
    "PrdRunArgs",
    "PrdTools",
    "elicit_asker",
    "policy_of",
    "prd_decision",
]

#: A PRD's name: one subject token and one directory name (as ``prd.json`` requires).
NAME_PATTERN: Final = r"^[A-Za-z0-9_\-]{1,64}$"

#: Asks the user to approve ``(tool, args, reason)``; True when approved once.
Asker = Callable[[str, dict[str, Any], str], Awaitable[bool]]


class PrdNameArgs(BaseModel):
    """The arguments of ``prd_status`` and ``prd_pause``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(pattern=NAME_PATTERN, description="the PRD's name (prd_list lists them)")


class PrdRunArgs(PrdNameArgs):
    """The arguments of ``prd_run`` (all but ``name`` as ``jidocode prd run`` takes them)."""

    provider: str = Field(default="", max_length=64, description="jidocode, codex, claude or gemini")
    model: str = Field(default="", max_length=200, description="the model the provider uses")
    worktree: bool = Field(default=False, description="work in .daedalus/worktrees/<name> on its own branch")
    branch: str = Field(default="", max_length=200, description="the branch to work on")
    allow_dirty: bool = Field(default=False, description="start though the work tree has changes")


class _NoArgs(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


#: Each PRD tool's arguments.
_ARGS: Final[dict[str, type[BaseModel]]] = {
    "prd_list": _NoArgs,
    "prd_status": PrdNameArgs,
    "prd_run": PrdRunArgs,
    "prd_pause": PrdNameArgs,
}


def _schema(model: type[BaseModel]) -> dict[str, Any]:
    schema = model.model_json_schema()
    schema.pop("title", None)
    return schema


_LOOP_SCHEMA: Final[dict[str, Any]] = {
    "type": "object",
    "properties": {"prd": {"type": "string"}, "state": {"type": "string"}},
    "required": ["prd", "state"],
}

PRD_TOOLS: Final = (
    types.Tool(
        name="prd_list",
        description="The project's PRD loops: each PRD's title, stories passed, the story in progress "
        "and its loop's state.",
        input_schema={"type": "object", "properties": {}, "additionalProperties": False},
        output_schema={"type": "object", "properties": {"prds": {"type": "array"}}, "required": ["prds"]},
        annotations=types.ToolAnnotations(read_only_hint=True, idempotent_hint=True, open_world_hint=False),
    ),
    types.Tool(
        name="prd_status",
        description="One PRD: its stories (state, acceptance criteria, attempts) and its loop "
        "(state, story and attempt being worked, error).",
        input_schema=_schema(PrdNameArgs),
        output_schema={
            "type": "object",
            "properties": {"name": {"type": "string"}, "stories": {"type": "array"}},
            "required": ["name", "stories"],
        },
        annotations=types.ToolAnnotations(read_only_hint=True, idempotent_hint=True, open_world_hint=False),
    ),
    types.Tool(
        name="prd_run",
        description="Start the PRD's loop: an agent works its stories one by one, runs the quality "
        "checks and commits each; it runs on in the service (follow it with prd_status).",
        input_schema=_schema(PrdRunArgs),
        output_schema=_LOOP_SCHEMA,
        annotations=types.ToolAnnotations(read_only_hint=False, destructive_hint=True, open_world_hint=True),
    ),
    types.Tool(
        name="prd_pause",
        description="Pause the PRD's loop (the running iteration is cancelled, the story stays in progress).",
        input_schema=_schema(PrdNameArgs),
        output_schema=_LOOP_SCHEMA,
        annotations=types.ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=True),
    ),
)
PRD_TOOL_NAMES: Final = frozenset(tool.name for tool in PRD_TOOLS)


def policy_of(summary: ToolPolicy, *, trusted: bool) -> Policy:
    """The project's effective policy from its summary (``ProjectClient.policy``); ``trusted``
    only words the hint of a default decision (the rules already count as trust says)."""
    return Policy.build(
        summary.root,
        allow=summary.allow,
        deny=summary.deny,
        ask=summary.ask,
        default=summary.default,
        trusted=trusted,
    )


def prd_decision(policy: Policy, tool: str) -> Decision:
    """The policy's decision on PRD tool ``tool`` (a tool by its name, as any named tool)."""
    return authorize(policy, tool, {})


def _status(view: PrdView) -> dict[str, Any]:
    """What ``prd_status`` returns: the stories as the loop sees them, and the loop."""
    stories = view.prd.get("userStories", [])
    loop = view.loop
    return {
        "name": view.name,
        "title": str(view.prd.get("title", "")),
        "stories": [
            {
                "id": s.get("id", ""),
                "title": s.get("title", ""),
                "state": "passed" if s.get("passes") else "in_progress" if s.get("inProgress") else "pending",
                "acceptance_criteria": list(s.get("acceptanceCriteria", [])),
                "attempts": s.get("attempts", 0),
                "notes": s.get("notes", ""),
            }
            for s in (stories if isinstance(stories, list) else [])
            if isinstance(s, dict)
        ],
        "loop": _loop(loop) if loop is not None else {"prd": view.name, "state": "ready"},
    }


def _loop(loop: LoopInfo) -> dict[str, Any]:
    data: dict[str, Any] = loop.model_dump(mode="json", exclude={"type", "owner", "updated_at"})
    return data


def _ok(data: dict[str, Any], text: str) -> types.CallToolResult:
    return types.CallToolResult(
        content=[types.TextContent(text=text)], structured_content=data, is_error=False
    )


class PrdTools:
    """The PRD tools of one project's MCP server (the handlers; the server routes by name)."""

    def __init__(self, prds: PrdClient, project: ProjectClient) -> None:
        self.prds = prds
        self.project = project

    async def exposed(self) -> list[types.Tool]:
        """The PRD tools the project's policy could allow or ask (``tools/list``)."""
        try:
            policy = await self._policy()
        except (JidoError, InvalidRule):
            return []
        return [tool for tool in PRD_TOOLS if tool_exposed(policy, tool.name)]

    async def _policy(self) -> Policy:
        summary = await self.project.policy()
        trusted = await asyncio.to_thread(is_trusted, summary.root, home=global_home())
        return policy_of(summary, trusted=trusted)

    async def call(
        self, name: str, arguments: dict[str, Any] | None, ask: Asker | None
    ) -> types.CallToolResult:
        """Run PRD tool ``name`` if the policy lets it; any refusal or failure as a text error."""
        args = parse_args(_ARGS[name], name, arguments)
        if isinstance(args, types.CallToolResult):
            return args
        try:
            refused = await self._refusal(name, args.model_dump(), ask)
            if refused is not None:
                return refused
            return await self._run(name, args)
        except JidoError as exc:
            return error_result(f"{name} failed ({exc.type}): {exc.message}", error=exc.type)
        except InvalidRule as exc:  # the project service reported a policy it could not have built
            return error_result(f"{name} failed (invalid_input): {exc}", error="invalid_input")

    async def _refusal(
        self, name: str, args: dict[str, Any], ask: Asker | None
    ) -> types.CallToolResult | None:
        """``None`` when the policy allows the call (or the user approved it), else the refusal."""
        decision = prd_decision(await self._policy(), name)
        if decision.effect is Effect.ALLOW:
            return None
        if decision.effect is Effect.ASK and ask is not None:
            if await ask(name, args, decision.reason):
                return None
            return error_result(f"{name}: the user denied the call", error="permission_denied")
        if decision.effect is Effect.ASK:
            return error_result(
                f"{name} needs approval: {decision.rule or 'the default'} asks ({decision.reason}). This MCP "
                "client cannot be asked here; allow it in the project's settings.json (permissions.allow) "
                "or use a client that supports elicitation.",
                error="approval_needed",
                rule=decision.rule,
            )
        return error_result(
            f"{name} failed (permission_denied): {decision.reason}",
            error="permission_denied",
            rule=decision.rule,
            **decision.details,
        )

    async def _run(self, name: str, args: BaseModel) -> types.CallToolResult:
        if isinstance(args, PrdRunArgs):
            loop = await self.prds.run(
                args.name,
                provider=args.provider,
                model=args.model,
                worktree=args.worktree,
                branch=args.branch,
                allow_dirty=args.allow_dirty,
            )
            return _ok(_loop(loop), f"{args.name}: the loop is {loop.state}")
        if not isinstance(args, PrdNameArgs):
            return _listed(await self.prds.list())
        if name == "prd_status":
            return _shown(await self.prds.get(args.name))
        loop = await self.prds.pause(args.name)
        return _ok(_loop(loop), f"{args.name}: the loop is {loop.state}")


def _listed(listed: PrdList) -> types.CallToolResult:
    """``prd_list``'s result: a line per PRD, the list as structured content."""
    text = "\n".join(
        f"{p.name}: {p.state}, {p.passed}/{p.stories} stories passed"
        + (f", {p.in_progress} in progress" if p.in_progress else "")
        + (f" ({p.problem})" if p.problem else "")
        for p in listed.prds
    )
    return _ok({"prds": [p.model_dump(mode="json") for p in listed.prds]}, text or "no PRDs in this project")


def _shown(view: PrdView) -> types.CallToolResult:
    """``prd_status``'s result: a summary line, the stories and the loop as structured content."""
    status = _status(view)
    passed = sum(s["state"] == "passed" for s in status["stories"])
    loop = status["loop"]
    text = f"{view.name}: loop {loop['state']}, {passed}/{len(status['stories'])} stories passed"
    if loop.get("story_id"):
        text += f", story {loop['story_id']} attempt {loop.get('attempt', 0)}"
    if loop.get("error"):
        text += f"; error: {loop['error']}"
    return _ok(status, text)


def elicit_asker(
    elicit: Callable[[str, dict[str, Any]], Awaitable[types.ElicitResult]],
) -> Asker:
    """An :data:`Asker` over the client's elicitation (an ``elicitation/create`` request)."""

    async def ask(tool: str, args: dict[str, Any], reason: str) -> bool:
        answer = await elicit(approval_message(tool, args, reason), APPROVAL_SCHEMA)
        return approval_decision(answer) == "approve_once"

    return ask
