"""The built-in tools: read_file, write_file, edit_file, list_dir, glob, grep, bash."""

from __future__ import annotations

from typing import Any

from .base import DEFAULT_OUTPUT_CAP, DEFAULT_TIMEOUT_S, BuiltinTool, ToolContext, ToolInput, cap_text
from .bash import BASH
from .files import EDIT_FILE, LIST_DIR, READ_FILE, WRITE_FILE
from .search import GLOB, GREP

__all__ = [
    "BUILTINS",
    "DEFAULT_OUTPUT_CAP",
    "DEFAULT_TIMEOUT_S",
    "BuiltinTool",
    "ToolContext",
    "ToolInput",
    "builtin_specs",
    "cap_text",
]

BUILTINS: dict[str, BuiltinTool] = {
    t.name: t for t in (READ_FILE, WRITE_FILE, EDIT_FILE, LIST_DIR, GLOB, GREP, BASH)
}


def builtin_specs() -> list[dict[str, Any]]:
    """Spec (name, description, input_schema) of every built-in tool."""
    return [t.spec() for t in BUILTINS.values()]
