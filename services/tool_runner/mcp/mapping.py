"""MCP tools as JidoCode tools (pure): names, specs and results.

- a tool ``t`` of server ``s`` is ``mcp__s__t`` in the catalogue (the name permission rules use:
  ``mcp__s`` covers every tool of ``s``, ``mcp__s__t`` one of them);
- its spec keeps the server's description, input and output schemas, and maps the MCP tool
  annotations onto :class:`~jidocode.shared.events.tools.ToolSafety`;
- a ``CallToolResult`` becomes the seed's tool result: ``data`` holds the text blocks joined
  (``text``) and the structured content (``structured``); images, audio and resources are
  ``artifacts``; ``isError`` is ``ok: false`` with an ``mcp_tool_error`` naming the server
  and the tool.
"""

from __future__ import annotations

import json
import re
from typing import Any, Final

import mcp_types as types

from jidocode.services.tool_runner.executor import fit_result
from jidocode.shared.events.tools import ToolResult, ToolResultError, ToolSafety, ToolSpec

__all__ = [
    "MAX_ARTIFACT_CHARS",
    "PREFIX",
    "TOOL_NAME",
    "fit",
    "mcp_name",
    "split_name",
    "tool_result",
    "tool_spec",
]

PREFIX: Final = "mcp__"
#: What a server's tool name must look like to join the catalogue (model APIs take at most 64).
TOOL_NAME: Final = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
#: A binary artifact (an image, audio, a blob) longer than this in base64 is replaced by a note.
MAX_ARTIFACT_CHARS: Final = 256 * 1024


def mcp_name(server: str, tool: str) -> str:
    """``mcp__<server>__<tool>``."""
    return f"{PREFIX}{server}__{tool}"


def split_name(name: str) -> tuple[str, str] | None:
    """``(server, tool)`` of an ``mcp__<server>__<tool>`` name; ``None`` for any other name."""
    if not name.startswith(PREFIX):
        return None
    server, sep, tool = name[len(PREFIX) :].partition("__")
    if not sep or not server or not tool:
        return None
    return server, tool


def tool_spec(server: str, tool: types.Tool) -> ToolSpec | None:
    """The catalogue's spec of ``tool``; ``None`` when its name cannot be a tool name here."""
    if not TOOL_NAME.match(tool.name) or len(mcp_name(server, tool.name)) > 128:
        return None
    hints = tool.annotations
    read_only = bool(hints and hints.read_only_hint)
    safety = ToolSafety(
        read_only=read_only,
        destructive=False
        if read_only
        else (True if hints is None or hints.destructive_hint is None else hints.destructive_hint),
        idempotent=bool(hints and hints.idempotent_hint),
        open_world=True if hints is None or hints.open_world_hint is None else hints.open_world_hint,
    )
    title = f"[MCP server {server}] "
    return ToolSpec(
        name=mcp_name(server, tool.name),
        description=title + (tool.description or tool.title or tool.name),
        input_schema=dict(tool.input_schema or {"type": "object"}),
        output_schema=dict(tool.output_schema or {}),
        safety=safety,
    )


def _binary(kind: str, mime: str, data: str) -> dict[str, Any]:
    if len(data) > MAX_ARTIFACT_CHARS:
        return {"type": kind, "mime_type": mime, "omitted": f"{len(data)} base64 characters, over the limit"}
    return {"type": kind, "mime_type": mime, "data": data}


def _artifact(block: types.ContentBlock) -> dict[str, Any]:
    if isinstance(block, types.ImageContent):
        return _binary("image", block.mime_type, block.data)
    if isinstance(block, types.AudioContent):
        return _binary("audio", block.mime_type, block.data)
    if isinstance(block, types.ResourceLink):
        return {
            "type": "resource_link",
            "uri": str(block.uri),
            "name": block.name,
            "mime_type": block.mime_type,
        }
    if isinstance(block, types.EmbeddedResource):
        res = block.resource
        if isinstance(res, types.TextResourceContents):
            return {"type": "resource", "uri": str(res.uri), "mime_type": res.mime_type, "text": res.text}
        return {"type": "resource", **_binary("blob", res.mime_type or "", res.blob), "uri": str(res.uri)}
    return {"type": getattr(block, "type", "unknown")}


def tool_result(server: str, tool: str, result: types.CallToolResult) -> ToolResult:
    """The seed's result format for ``result``."""
    texts = [b.text for b in result.content if isinstance(b, types.TextContent)]
    artifacts = [_artifact(b) for b in result.content if not isinstance(b, types.TextContent)]
    text = "\n".join(texts)
    if result.is_error:
        return ToolResult(
            ok=False,
            artifacts=artifacts,
            error=ToolResultError(
                type="mcp_tool_error",
                message=(text or f"tool {tool!r} of MCP server {server!r} reported an error")[:4000],
                details={"server": server, "tool": tool},
            ),
        )
    data: dict[str, Any] = {"text": text}
    if result.structured_content is not None:
        data["structured"] = result.structured_content
    return ToolResult(ok=True, data=data, artifacts=artifacts)


def _size(value: Any) -> int:
    return len(json.dumps(value, ensure_ascii=False, default=str).encode("utf-8", "surrogatepass"))


def fit(result: ToolResult, limit: int) -> ToolResult:
    """``result`` cut to ``limit`` bytes of JSON (a reply must fit one NATS message): artifacts are
    dropped from the end first, then the data is cut (:func:`..executor.fit_result`); each cut is
    said in ``logs``."""
    if _size(result.model_dump()) <= limit:
        return result
    logs = list(result.logs)
    artifacts = list(result.artifacts)
    kept = len(artifacts)
    while artifacts and _size(artifacts) > limit // 2:
        artifacts.pop()
    if len(artifacts) < kept:
        logs.append(f"{kept - len(artifacts)} of {kept} artifacts dropped to fit the result size limit")
    data, cut = fit_result(result.data, max(1024, limit - _size(artifacts) - 4096))
    if cut:
        logs.append("output truncated")
    return result.model_copy(update={"data": data, "artifacts": artifacts, "logs": logs})
