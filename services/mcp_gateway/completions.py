"""MCP completions: the values a client offers while the user types a slash command's argument or a skill name.

``completion/complete`` with

* ``ref/prompt`` (a slash command): an argument that names a file (its name or description
  says path, file, dir or folder) completes to the project's paths; ``arguments``, the one
  argument of a command with an ``argument-hint``, completes its last word as a path; any
  other argument has no values to offer.
* ``ref/resource`` on ``jidocode://skills/{name}`` (the skills' template): the skill names.

Paths come from the project's ``list_dir`` tool through the tool runner, so the policy sees
each listing like any call (a directory it refuses lists nothing). At most
:data:`MAX_VALUES` values, sorted; ``hasMore`` when there were more.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any, Final

import mcp_types as types
from mcp.shared.exceptions import MCPError

from jidocode.shared.clients import AssetsClient, ToolsClient
from jidocode.shared.envelope import new_id
from jidocode.shared.errors import JidoError, NotFound
from jidocode.shared.events.tools import ToolCallMeta

from .mapping import SKILL_URI_PREFIX

__all__ = ["MAX_VALUES", "SKILL_TEMPLATE", "Completions", "completion", "is_path_argument", "path_matches"]

#: The most values one completion carries (the MCP specification's limit).
MAX_VALUES: Final = 100
#: The skills as a resource template, whose ``name`` completes.
SKILL_TEMPLATE: Final = SKILL_URI_PREFIX + "{name}"
#: Seconds a directory listing may take.
LIST_TIMEOUT_S: Final = 15.0

_PATH_WORDS: Final = re.compile(r"path|file|dir|folder", re.IGNORECASE)


def is_path_argument(argument: dict[str, Any]) -> bool:
    """Whether a command's declared argument names a file or directory (by its name or description)."""
    return bool(_PATH_WORDS.search(f"{argument.get('name', '')} {argument.get('description') or ''}"))


def completion(values: Sequence[str]) -> types.CompleteResult:
    """The result offering ``values`` (sorted, the first :data:`MAX_VALUES`)."""
    ordered = sorted(set(values))
    return types.CompleteResult(
        completion=types.Completion(
            values=ordered[:MAX_VALUES], total=len(ordered), has_more=len(ordered) > MAX_VALUES
        )
    )


def path_matches(directory: str, stem: str, entries: list[dict[str, Any]]) -> list[str]:
    """The paths under ``directory`` whose name starts with ``stem`` (directories end with ``/``;
    hidden ones only when ``stem`` starts with a dot)."""
    prefix = f"{directory}/" if directory else ""
    found = []
    for entry in entries:
        name = str(entry.get("name", ""))
        if not name.startswith(stem) or (name.startswith(".") and not stem.startswith(".")):
            continue
        found.append(prefix + name + ("/" if entry.get("type") == "dir" else ""))
    return found


class Completions:
    """The ``completion/complete`` handler of one project's server."""

    def __init__(self, assets: AssetsClient, tools: ToolsClient) -> None:
        self.assets = assets
        self.tools = tools

    async def complete(self, ctx: Any, params: types.CompleteRequestParams) -> types.CompleteResult:
        ref, argument = params.ref, params.argument
        if isinstance(ref, types.PromptReference):
            return completion(await self._command_argument(ref.name, argument.name, argument.value))
        if str(ref.uri) != SKILL_TEMPLATE or argument.name != "name":
            raise MCPError(
                types.INVALID_PARAMS,
                f"no completions for {argument.name!r} of {ref.uri!r}: this server completes "
                f"'name' of {SKILL_TEMPLATE} and the arguments of its prompts",
            )
        skills = await self.assets.list("skill")
        return completion([str(i["name"]) for i in skills.items if str(i["name"]).startswith(argument.value)])

    async def _command_argument(self, command: str, name: str, value: str) -> list[str]:
        try:
            doc = await self.assets.get("command", command)
        except NotFound:
            raise MCPError(types.INVALID_PARAMS, f"no prompt named {command!r}") from None
        except JidoError as exc:
            raise MCPError(types.INTERNAL_ERROR, f"prompt {command!r}: {exc.message}") from None
        declared = [dict(a) for a in doc.asset.get("arguments") or []]
        if not declared and doc.asset.get("argument_hint") and name == "arguments":
            head, _, last = value.rpartition(" ")
            return [f"{head} {path}" if head else path for path in await self.paths(last)]
        argument = next((a for a in declared if a.get("name") == name), None)
        if argument is None:
            raise MCPError(types.INVALID_PARAMS, f"prompt {command!r} has no argument {name!r}")
        return await self.paths(value) if is_path_argument(argument) else []

    async def paths(self, value: str) -> list[str]:
        """The project's paths that complete ``value`` (a path relative to the project root)."""
        directory, _, stem = value.rpartition("/")
        meta = ToolCallMeta(request_id=f"mcp-complete-{new_id()}")
        try:
            listed = await self.tools.run(
                "list_dir", {"path": directory or "."}, meta=meta, timeout=LIST_TIMEOUT_S
            )
        except JidoError:
            return []
        if not listed.ok or not isinstance(listed.data, dict):
            return []  # refused by the policy, or no such directory: nothing to offer
        return path_matches(directory, stem, list(listed.data.get("entries") or []))
