"""read_file, write_file, edit_file, list_dir: file tools over the checked path only."""

from __future__ import annotations

import asyncio
import os
import stat
from typing import Any

from jidocode.services.tool_runner import fsops
from jidocode.shared.errors import InvalidInput, NotFound
from jidocode.shared.tools import specs
from jidocode.shared.tools.inputs import EditFileInput, ListDirInput, ReadFileInput, WriteFileInput

from .base import BuiltinTool, ToolContext, cap_text

__all__ = ["EDIT_FILE", "LIST_DIR", "READ_FILE", "WRITE_FILE"]

_MAX_ENTRIES = 2000


def _read_text(ctx: ToolContext) -> str:
    raw: bytes = fsops.read_bytes(ctx.base, ctx.path)
    if b"\x00" in raw[:8192]:
        raise InvalidInput(f"{ctx.rel(ctx.path)} looks like a binary file")
    return raw.decode("utf-8", "replace")


async def _read_file(args: ReadFileInput, ctx: ToolContext) -> dict[str, Any]:
    text = await asyncio.to_thread(_read_text, ctx)
    lines = text.splitlines(keepends=True)
    start = args.offset - 1
    chosen = lines[start : start + args.limit]
    content, truncated = cap_text("".join(chosen).encode(), ctx.output_cap)
    return {
        "path": ctx.rel(ctx.path),
        "content": content,
        "start_line": args.offset,
        "end_line": start + len(chosen),
        "total_lines": len(lines),
        "truncated": truncated,
    }


async def _write_file(args: WriteFileInput, ctx: ToolContext) -> dict[str, Any]:
    data = args.content.encode("utf-8")
    created = await asyncio.to_thread(fsops.write_bytes, ctx.base, ctx.path, data)
    return {"path": ctx.rel(ctx.path), "bytes": len(data), "created": created}


def _edit(args: EditFileInput, ctx: ToolContext) -> dict[str, Any]:
    if args.old_string == args.new_string:
        raise InvalidInput("old_string and new_string are the same")
    text = _read_text(ctx)
    count = text.count(args.old_string)
    shown = ctx.rel(ctx.path)
    if count == 0:
        raise InvalidInput(f"old_string not found in {shown}", details={"occurrences": 0})
    if count > 1 and not args.replace_all:
        raise InvalidInput(
            f"old_string occurs {count} times in {shown}; add surrounding context to make it unique "
            "or set replace_all",
            details={"occurrences": count},
        )
    new = (
        text.replace(args.old_string, args.new_string)
        if args.replace_all
        else text.replace(args.old_string, args.new_string, 1)
    )
    fsops.write_bytes(ctx.base, ctx.path, new.encode("utf-8"), create_parents=False)
    return {"path": shown, "replacements": count if args.replace_all else 1}


async def _edit_file(args: EditFileInput, ctx: ToolContext) -> dict[str, Any]:
    return await asyncio.to_thread(_edit, args, ctx)


def _list(ctx: ToolContext) -> dict[str, Any]:
    entries: list[dict[str, Any]] = []
    with fsops.open_dir(ctx.base, ctx.path) as dfd:
        names = sorted(os.listdir(dfd))
        for name in names[:_MAX_ENTRIES]:
            try:
                st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
            except FileNotFoundError:
                continue
            if stat.S_ISDIR(st.st_mode):
                kind = "dir"
            elif stat.S_ISREG(st.st_mode):
                kind = "file"
            elif stat.S_ISLNK(st.st_mode):
                kind = "symlink"
            else:
                kind = "other"
            entries.append({"name": name, "type": kind, "size": st.st_size if kind == "file" else None})
    return {"path": ctx.rel(ctx.path), "entries": entries, "truncated": len(names) > _MAX_ENTRIES}


async def _list_dir(args: ListDirInput, ctx: ToolContext) -> dict[str, Any]:
    try:
        return await asyncio.to_thread(_list, ctx)
    except NotADirectoryError:
        raise InvalidInput(f"{args.path} is not a directory") from None
    except FileNotFoundError:
        raise NotFound(f"{args.path}: no such directory") from None


READ_FILE = BuiltinTool(specs.READ_FILE, _read_file)  # type: ignore[arg-type]
WRITE_FILE = BuiltinTool(specs.WRITE_FILE, _write_file)  # type: ignore[arg-type]
EDIT_FILE = BuiltinTool(specs.EDIT_FILE, _edit_file)  # type: ignore[arg-type]
LIST_DIR = BuiltinTool(specs.LIST_DIR, _list_dir)  # type: ignore[arg-type]
