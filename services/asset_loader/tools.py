"""The tools the asset loader offers the tool catalog, and their dispatch.

==================  =========================================================
``run_command``     render a slash command with its arguments (the prompt)
``run_workflow``    run a workflow; its steps go through the tool runner
``query_skill_graph``  neighbours / links / backlinks / search / path / node
``load_skill``      a skill's documentation (body) and metadata
``invoke_skill``    dispatch a skill route (pre/post hooks, tool runner)
==================  =========================================================

The tool runner authorizes these by name under the project policy and then
forwards them to ``jido.assets.<p>.call_tool``; the result is a
:class:`ToolResult` (``ok`` + ``data``, or ``error``).
"""

from __future__ import annotations

from typing import Any, Final

from jidocode.services.asset_loader.generation import Generation
from jidocode.services.asset_loader.loaders.command import render_command
from jidocode.services.asset_loader.runtime import AssetRuntime, error_result
from jidocode.shared.errors import InvalidInput, JidoError, NotFound
from jidocode.shared.events.tools import RunTool, ToolResult

__all__ = ["ASSET_TOOLS", "call_asset_tool", "graph_query", "tool_specs"]

_STR: Final = {"type": "string"}

ASSET_TOOLS: Final[dict[str, dict[str, Any]]] = {
    "run_command": {
        "description": "Render a project slash command (from .jido/commands) with its arguments; returns the prompt.",
        "input_schema": {
            "type": "object",
            "properties": {
                "name": {**_STR, "description": "command name"},
                "arguments": {"description": "argument string, list, or object by argument name"},
            },
            "required": ["name"],
        },
    },
    "run_workflow": {
        "description": "Run a project workflow (from .jido/workflows) step by step; returns its outputs.",
        "input_schema": {
            "type": "object",
            "properties": {"name": _STR, "inputs": {"type": "object"}},
            "required": ["name"],
        },
    },
    "query_skill_graph": {
        "description": "Query the skill graph (notes in .jido/skill_graph linked by [[wiki links]]): "
        "op is node, neighbours, links, backlinks, search, path or nodes.",
        "input_schema": {
            "type": "object",
            "properties": {
                "op": {
                    "type": "string",
                    "enum": ["node", "neighbours", "links", "backlinks", "search", "path", "nodes"],
                },
                "node": _STR,
                "target": _STR,
                "query": _STR,
                "directed": {"type": "boolean"},
                "limit": {"type": "integer", "minimum": 1, "maximum": 100},
            },
            "required": ["op"],
        },
    },
    "load_skill": {
        "description": "Load a skill's documentation (SKILL.md body), routes, allowed tools and scripts.",
        "input_schema": {"type": "object", "properties": {"name": _STR}, "required": ["name"]},
    },
    "invoke_skill": {
        "description": "Invoke a route of a skill (e.g. pdf/extract/text); the action runs through the tool runner.",
        "input_schema": {
            "type": "object",
            "properties": {"skill": _STR, "route": _STR, "params": {"type": "object"}},
            "required": ["skill", "route"],
        },
    },
}


def tool_specs(gen: Generation) -> list[dict[str, Any]]:
    """The asset tools as tool specs; descriptions list what exists right now."""
    specs = []
    listing = {
        "run_command": ", ".join(list(gen.commands)[:30]),
        "run_workflow": ", ".join(list(gen.workflows)[:30]),
        "load_skill": ", ".join(list(gen.skills)[:30]),
        "invoke_skill": ", ".join(
            f"{s.name}:{r.path}" for s in list(gen.skills.values())[:30] for r in s.router[:5]
        ),
    }
    for name, spec in ASSET_TOOLS.items():
        description = spec["description"]
        if listing.get(name):
            description = f"{description} Available: {listing[name]}."
        specs.append({"name": name, "description": description, "input_schema": spec["input_schema"]})
    return specs


def _str_arg(args: dict[str, Any], key: str) -> str:
    value = args.get(key)
    if not isinstance(value, str) or not value:
        raise InvalidInput(f"argument {key!r} must be a non-empty string", details={"argument": key})
    return value


def graph_query(gen: Generation, op: str, args: dict[str, Any]) -> Any:
    graph = gen.graph
    limit = args.get("limit", 20)
    if not isinstance(limit, int) or not 1 <= limit <= 100:
        raise InvalidInput("limit must be an integer 1..100")
    if op == "nodes":
        return [{"id": n.id, "title": n.title} for n in list(graph.nodes.values())[:limit]]
    if op == "search":
        return [
            {"id": i, "title": graph.nodes[i].title, "score": s}
            for i, s in graph.search(_str_arg(args, "query"), limit)
        ]
    node = _str_arg(args, "node")
    if op == "node":
        found = graph.node(node)
        return {
            **found.model_dump(mode="json"),
            "links": graph.out_edges.get(found.id, []),
            "backlinks": graph.in_edges.get(found.id, []),
        }
    if op == "neighbours":
        return graph.neighbours(node)
    if op == "links":
        return graph.links(node)
    if op == "backlinks":
        return graph.backlinks(node)
    if op == "path":
        return graph.shortest_path(
            node, _str_arg(args, "target"), directed=args.get("directed", True) is not False
        )
    raise InvalidInput(f"unknown graph op {op!r}", details={"op": op})


async def call_asset_tool(gen: Generation, runtime: AssetRuntime, call: RunTool) -> ToolResult:
    """Run one asset tool; every failure is an ``ok: false`` result, never an exception."""
    args = call.args
    try:
        if call.name == "run_command":
            command = gen.commands.get(_str_arg(args, "name"))
            if command is None:
                raise NotFound(f"no command named {args['name']!r}", details={"command": args["name"]})
            prompt = render_command(command, args.get("arguments"))
            return ToolResult(
                ok=True, data={"command": command.name, "prompt": prompt, "model": command.model}
            )
        if call.name == "run_workflow":
            inputs = args.get("inputs") or {}
            if not isinstance(inputs, dict):
                raise InvalidInput("inputs must be an object")
            return await runtime.run_workflow(gen, _str_arg(args, "name"), inputs, call.meta)
        if call.name == "query_skill_graph":
            return ToolResult(ok=True, data=graph_query(gen, _str_arg(args, "op"), args))
        if call.name == "load_skill":
            skill = gen.skills.get(_str_arg(args, "name"))
            if skill is None:
                raise NotFound(f"no skill named {args['name']!r}", details={"skill": args["name"]})
            return ToolResult(
                ok=True,
                data={
                    "name": skill.name,
                    "description": skill.description,
                    "body": skill.body,
                    "routes": [r.path for r in skill.router],
                    "allowed_tools": skill.allowed_tools,
                    "scripts": skill.scripts,
                    "path": skill.path,
                },
            )
        if call.name == "invoke_skill":
            params = args.get("params") or {}
            if not isinstance(params, dict):
                raise InvalidInput("params must be an object")
            return await runtime.invoke_skill(
                gen, _str_arg(args, "skill"), _str_arg(args, "route"), params, call.meta
            )
        raise NotFound(f"the asset loader has no tool {call.name!r}", details={"tool": call.name})
    except JidoError as exc:
        return error_result(exc)
