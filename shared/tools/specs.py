"""The spec of every built-in tool: name, description, input and output schemas, safety.

The project service lists them in its catalog (``builtin_specs``); the tool
runner pairs each with the code that runs it. The order is the catalog's. A
model sees the name, the description and the input schema; the output schema
(of the ``data`` of a successful result) and the safety hints are for clients.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from jidocode.shared.events.tools import ToolSafety

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
    "BashOutput",
    "BuiltinSpec",
    "DirEntry",
    "EditFileOutput",
    "GlobOutput",
    "GrepMatch",
    "GrepOutput",
    "ListDirOutput",
    "ReadFileOutput",
    "ToolOutput",
    "WriteFileOutput",
    "builtin_specs",
]


class ToolOutput(BaseModel):
    """Base of the outputs: what a successful call's ``data`` holds (its JSON schema is the spec's
    ``output_schema``). Other fields may appear: a result cut down to fit its size limit is
    marked ``truncated``."""

    model_config = ConfigDict(frozen=True)


class ReadFileOutput(ToolOutput):
    path: str = Field(description="the file, relative to the project root")
    content: str = Field(description="the lines read")
    start_line: int = Field(description="first line returned (1-based)")
    end_line: int = Field(description="last line returned")
    total_lines: int = Field(description="lines in the file")
    truncated: bool = Field(description="the content was cut at the output cap")


class WriteFileOutput(ToolOutput):
    path: str
    bytes: int = Field(description="bytes written")
    created: bool = Field(description="the file did not exist before")


class EditFileOutput(ToolOutput):
    path: str
    replacements: int = Field(description="occurrences replaced")


class DirEntry(BaseModel):
    model_config = ConfigDict(frozen=True)

    name: str
    type: Literal["dir", "file", "symlink", "other"]
    size: int | None = Field(description="bytes, for a file")


class ListDirOutput(ToolOutput):
    path: str
    entries: list[DirEntry]
    truncated: bool = Field(description="the directory has more entries than listed")


class GlobOutput(ToolOutput):
    """``withheld``, ``withheld_count`` and ``note`` are there when files under ask rules were left out."""

    pattern: str
    path: str
    matches: list[str] = Field(description="matching paths, relative to the project root")
    truncated: bool = Field(description="more files match than max_results")
    withheld: list[str] = Field(default_factory=list, description="some of the files left out")
    withheld_count: int = Field(default=0, description="files left out")
    note: str = Field(default="", description="what to do to see them")


class GrepMatch(BaseModel):
    model_config = ConfigDict(frozen=True)

    path: str
    line: int = Field(description="line number (1-based)")
    text: str = Field(description="the line (long lines are cut)")


class GrepOutput(ToolOutput):
    """``withheld``, ``withheld_count`` and ``note`` are there when files under ask rules were left out."""

    pattern: str
    matches: list[GrepMatch]
    files_searched: int
    truncated: bool = Field(description="more lines match than max_results or the output cap")
    withheld: list[str] = Field(default_factory=list, description="some of the files left out")
    withheld_count: int = Field(default=0, description="files left out")
    note: str = Field(default="", description="what to do to see them")


class BashOutput(ToolOutput):
    exit_code: int = Field(description="the command's exit status (negative: killed by that signal)")
    output: str = Field(description="stdout and stderr, interleaved, capped")
    truncated: bool = Field(description="the output was cut at the output cap")
    output_bytes: int = Field(description="bytes the command wrote in all")
    duration_ms: float
    sandbox: Literal["bubblewrap", "landlock", "off"] = Field(description="the OS sandbox it ran in")
    protected_restored: list[str] = Field(
        default_factory=list, description="protected paths the command changed, put back after it"
    )


#: Reads files of the project and nothing else.
_READS = ToolSafety(read_only=True, destructive=False, idempotent=True, open_world=False, permission="Read")


@dataclass(frozen=True)
class BuiltinSpec:
    """What the catalog says of a built-in tool (its execution lives in the tool runner)."""

    name: str
    description: str
    input_model: type[ToolInput]
    output_model: type[ToolOutput]
    safety: ToolSafety

    def spec(self) -> dict[str, Any]:
        """The tool spec (a :class:`~jidocode.shared.events.tools.ToolSpec` as JSON)."""
        return {
            "name": self.name,
            "description": self.description,
            "input_schema": self.input_model.model_json_schema(),
            "output_schema": self.output_model.model_json_schema(),
            "safety": self.safety.model_dump(),
        }


READ_FILE = BuiltinSpec(
    "read_file",
    "Read a text file of the project. Returns its lines from `offset` (1-based), at most `limit` lines.",
    ReadFileInput,
    ReadFileOutput,
    _READS,
)
WRITE_FILE = BuiltinSpec(
    "write_file",
    "Create or overwrite a file of the project with `content` (parent directories are created).",
    WriteFileInput,
    WriteFileOutput,
    # the same content written again leaves the same file
    ToolSafety(read_only=False, destructive=True, idempotent=True, open_world=False, permission="Edit"),
)
EDIT_FILE = BuiltinSpec(
    "edit_file",
    "Replace the exact text `old_string` by `new_string` in a file. `old_string` must occur exactly once "
    "unless `replace_all` is true.",
    EditFileInput,
    EditFileOutput,
    ToolSafety(read_only=False, destructive=True, idempotent=False, open_world=False, permission="Edit"),
)
LIST_DIR = BuiltinSpec(
    "list_dir",
    "List the entries of a directory of the project (name, type, size).",
    ListDirInput,
    ListDirOutput,
    _READS,
)
GLOB = BuiltinSpec(
    "glob",
    "Find files of the project whose path (relative to `path`) matches a glob such as **/*.py.",
    GlobInput,
    GlobOutput,
    _READS,
)
GREP = BuiltinSpec(
    "grep",
    "Search file contents with a regular expression; returns path, line number and line for each match. "
    "`glob` filters the files searched.",
    GrepInput,
    GrepOutput,
    _READS,
)
BASH = BuiltinSpec(
    "bash",
    "Run a bash command in the project root (non-interactive, stdin empty, output capped, time-limited). "
    "Each command it contains must be allowed by the project's permissions.",
    BashInput,
    BashOutput,
    # any command: it may change or delete anything it can reach, and reach the network
    ToolSafety(read_only=False, destructive=True, idempotent=False, open_world=True, permission="Bash"),
)

#: Every built-in tool, in catalog order.
BUILTIN_SPECS: tuple[BuiltinSpec, ...] = (READ_FILE, WRITE_FILE, EDIT_FILE, LIST_DIR, GLOB, GREP, BASH)


def builtin_specs() -> list[dict[str, Any]]:
    """The spec of every built-in tool (name, description, input and output schemas, safety)."""
    return [t.spec() for t in BUILTIN_SPECS]
