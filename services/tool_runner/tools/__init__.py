"""The built-in tools: read_file, write_file, edit_file, list_dir, glob, grep, bash, web_fetch.

Their specs and input models are shared (``jidocode.shared.tools``: the
project's catalog lists them); this package holds the code that runs them.
"""

from __future__ import annotations

from .base import DEFAULT_OUTPUT_CAP, DEFAULT_TIMEOUT_S, BuiltinTool, ToolContext, cap_text
from .bash import BASH
from .files import EDIT_FILE, LIST_DIR, READ_FILE, WRITE_FILE
from .search import GLOB, GREP
from .web_fetch import WEB_FETCH

__all__ = [
    "BUILTINS",
    "DEFAULT_OUTPUT_CAP",
    "DEFAULT_TIMEOUT_S",
    "BuiltinTool",
    "ToolContext",
    "cap_text",
]

BUILTINS: dict[str, BuiltinTool] = {
    t.name: t for t in (READ_FILE, WRITE_FILE, EDIT_FILE, LIST_DIR, GLOB, GREP, BASH, WEB_FETCH)
}
