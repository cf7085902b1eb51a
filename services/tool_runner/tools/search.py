"""glob and grep: walk the tree under the checked path, never following symlinks.

Files the policy would refuse (sensitive files, files under a deny rule,
anything resolving outside the sandbox) are skipped silently, so a search
cannot read what ``read_file`` may not.
"""

from __future__ import annotations

import asyncio
import os
import re
from collections.abc import Iterator
from typing import Any, Final

from jidocode.services.tool_runner import fsops
from jidocode.shared.errors import InvalidInput, JidoError, NotFound
from jidocode.shared.policy.rules import glob_to_regex
from jidocode.shared.tools import specs
from jidocode.shared.tools.inputs import GlobInput, GrepInput

from .base import BuiltinTool, ToolContext

__all__ = ["GLOB", "GREP"]

_SKIP_DIRS: Final = frozenset({".git", "node_modules", "__pycache__", ".venv", ".mypy_cache", ".ruff_cache"})
_MAX_FILE: Final = 4 * 1024 * 1024
_MAX_LINE: Final = 2000


def _walk(top: str) -> Iterator[str]:
    """Regular files below ``top`` (symlinks neither followed nor listed), sorted."""
    if os.path.isfile(top) and not os.path.islink(top):
        yield top
        return
    for dirpath, dirnames, filenames in os.walk(top, followlinks=False):
        dirnames[:] = sorted(d for d in dirnames if d not in _SKIP_DIRS)
        for name in sorted(filenames):
            full = os.path.join(dirpath, name)
            if not os.path.islink(full):
                yield full


def _glob(args: GlobInput, ctx: ToolContext) -> dict[str, Any]:
    if not os.path.isdir(ctx.path):
        raise NotFound(f"{args.path}: no such directory")
    rx = re.compile("^" + glob_to_regex(args.pattern.lstrip("/")) + "$", re.DOTALL)
    matches: list[str] = []
    truncated = False
    for full in _walk(ctx.path):
        rel = os.path.relpath(full, ctx.path)
        if rx.match(rel) or ("/" not in args.pattern and rx.match(os.path.basename(rel))):
            if len(matches) >= args.max_results:
                truncated = True
                break
            matches.append(ctx.rel(full))
    return {"pattern": args.pattern, "path": ctx.rel(ctx.path), "matches": matches, "truncated": truncated}


def _grep(args: GrepInput, ctx: ToolContext) -> dict[str, Any]:
    try:
        rx = re.compile(args.pattern, re.IGNORECASE if args.case_insensitive else 0)
    except re.error as exc:
        raise InvalidInput(f"invalid regular expression: {exc}") from None
    name_rx = re.compile("^" + glob_to_regex(args.glob) + "$", re.DOTALL) if args.glob else None
    if not os.path.exists(ctx.path):
        raise NotFound(f"{args.path}: no such file or directory")
    results: list[dict[str, Any]] = []
    truncated = False
    budget = ctx.output_cap
    files = 0
    for full in _walk(ctx.path):
        rel_top = os.path.relpath(full, ctx.path)
        if name_rx is not None and not (name_rx.match(rel_top) or name_rx.match(os.path.basename(full))):
            continue
        if not ctx.may_read("grep", full):
            continue
        try:
            raw = fsops.read_bytes(ctx.base, full, limit=_MAX_FILE)
        except (JidoError, OSError):  # unreadable, too large or raced: skipped, grep is best effort
            continue
        if b"\x00" in raw[:8192]:
            continue
        files += 1
        for lineno, line in enumerate(raw.decode("utf-8", "replace").splitlines(), start=1):
            if rx.search(line):
                text = line if len(line) <= _MAX_LINE else line[:_MAX_LINE] + "…"
                budget -= len(text) + len(full) + 16
                if len(results) >= args.max_results or budget < 0:
                    truncated = True
                    break
                results.append({"path": ctx.rel(full), "line": lineno, "text": text})
        if truncated:
            break
    return {
        "pattern": args.pattern,
        "matches": results,
        "files_searched": files,
        "truncated": truncated,
    }


async def _glob_tool(args: GlobInput, ctx: ToolContext) -> dict[str, Any]:
    return await asyncio.to_thread(_glob, args, ctx)


async def _grep_tool(args: GrepInput, ctx: ToolContext) -> dict[str, Any]:
    return await asyncio.to_thread(_grep, args, ctx)


GLOB = BuiltinTool(specs.GLOB, _glob_tool)  # type: ignore[arg-type]
GREP = BuiltinTool(specs.GREP, _grep_tool)  # type: ignore[arg-type]
