"""The spec of every built-in tool: name, description and input schema, as the model sees them.

The project service lists them in its catalog (``builtin_specs``); the tool
runner pairs each with the code that runs it. The order is the catalog's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .inputs import (
    BashInput,
    EditFileInput,
    GlobInput,
    GrepInput,
    ListDirInput,
    ReadFileInput,
    ToolInput,
    WriteFileInput,
)

__all__ = [
    "BASH",
    "BUILTIN_SPECS",
    "EDIT_FILE",
    "GLOB",
    "GREP",
    "LIST_DIR",
    "READ_FILE",
    "WRITE_FILE",
    "BuiltinSpec",
    "builtin_specs",
]


@dataclass(frozen=True)
class BuiltinSpec:
    """What the model knows of a built-in tool (its execution lives in the tool runner)."""

    name: str
    description: str
    input_model: type[ToolInput]

    def spec(self) -> dict[str, Any]:
        """The tool spec for LLM exposure: name, description, JSON-schema input."""
        return {
            "name": self.name,
            "description": self.description,
            "input_schema": self.input_model.model_json_schema(),
        }


READ_FILE = BuiltinSpec(
    "read_file",
    "Read a text file of the project. Returns its lines from `offset` (1-based), at most `limit` lines.",
    ReadFileInput,
)
WRITE_FILE = BuiltinSpec(
    "write_file",
    "Create or overwrite a file of the project with `content` (parent directories are created).",
    WriteFileInput,
)
EDIT_FILE = BuiltinSpec(
    "edit_file",
    "Replace the exact text `old_string` by `new_string` in a file. `old_string` must occur exactly once "
    "unless `replace_all` is true.",
    EditFileInput,
)
LIST_DIR = BuiltinSpec(
    "list_dir",
    "List the entries of a directory of the project (name, type, size).",
    ListDirInput,
)
GLOB = BuiltinSpec(
    "glob",
    "Find files of the project whose path (relative to `path`) matches a glob such as **/*.py.",
    GlobInput,
)
GREP = BuiltinSpec(
    "grep",
    "Search file contents with a regular expression; returns path, line number and line for each match. "
    "`glob` filters the files searched.",
    GrepInput,
)
BASH = BuiltinSpec(
    "bash",
    "Run a bash command in the project root (non-interactive, stdin empty, output capped, time-limited). "
    "Each command it contains must be allowed by the project's permissions.",
    BashInput,
)

#: Every built-in tool, in catalog order.
BUILTIN_SPECS: tuple[BuiltinSpec, ...] = (READ_FILE, WRITE_FILE, EDIT_FILE, LIST_DIR, GLOB, GREP, BASH)


def builtin_specs() -> list[dict[str, Any]]:
    """Spec (name, description, input_schema) of every built-in tool."""
    return [t.spec() for t in BUILTIN_SPECS]
