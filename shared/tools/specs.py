"""The declaration of every built-in tool: the one place its facts are written.

Each :class:`BuiltinSpec` says of one tool its name, its description, its input and output
models, whether it reads, writes or runs (:attr:`~BuiltinSpec.access`), the permission name
rules give it (``Read``, ``Edit``, ``Bash``), its path argument and its other names. Everything
else is derived from them: the catalog's specs and safety hints (``builtin_specs``), the
policy's tables (``jidocode.shared.policy.builtins``: path tools, rule names, read and write
sets), the tool runner's read-only set and the names agent templates use. The order is the
catalog's. A model sees the name, the description and the input schema; the output schema
(of the ``data`` of a successful result) and the safety hints are for clients.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final, Literal

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
    WebFetchInput,
    WriteFileInput,
)

__all__ = [
    "BASH",
    "BUILTIN_BY_NAME",
    "BUILTIN_SPECS",
    "EDIT_FILE",
    "GLOB",
    "GREP",
    "LIST_DIR",
    "READ_FILE",
    "WEB_FETCH",
    "WRITE_FILE",
    "Access",
    "BashOutput",
    "BuiltinSpec",
    "DirEntry",
    "EditFileOutput",
    "GlobOutput",
    "GrepMatch",
    "GrepOutput",
    "ListDirOutput",
    "PathArg",
    "Permission",
    "ReadFileOutput",
    "ToolOutput",
    "WebFetchOutput",
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


class WebFetchOutput(ToolOutput):
    url: str = Field(description="the URL the content came from (after redirects)")
    status: int = Field(description="the HTTP status of the last response")
    content_type: str = Field(description="the Content-Type of the response")
    content: str = Field(description="the page as text (HTML turned into markdown)")
    truncated: bool = Field(description="the body or the text was cut at a size cap")
    redirects: list[str] = Field(default_factory=list, description="the URLs redirected through")


#: What a call does: reads files of the project, writes them, or runs a command.
Access = Literal["read", "write", "run"]
#: The name permission rules give a tool (``Read(src/**)``, ``Edit(app.py)``, ``Bash(npm test:*)``).
Permission = Literal["Read", "Edit", "Bash", "WebFetch"]


@dataclass(frozen=True)
class PathArg:
    """The argument of a file tool that names its path, and the path taken when it is left out."""

    name: str = "path"
    default: str | None = None


@dataclass(frozen=True)
class BuiltinSpec:
    """The declaration of a built-in tool (its execution lives in the tool runner).

    ``access`` is its read/write class; ``permission`` the rule name covering it with the
    other tools of that class; ``rule_names`` the other names a rule may give it alone
    (Claude Code's ``Glob``, ``Grep``, ``LS``); ``agent_names`` Claude Code's names for it in
    an agent template's ``tools``; ``idempotent`` whether a second call with the same
    arguments changes nothing more. Its safety hints follow from these.
    """

    name: str
    description: str
    input_model: type[ToolInput]
    output_model: type[ToolOutput]
    access: Access
    permission: Permission
    idempotent: bool
    path_arg: PathArg | None = None
    rule_names: tuple[str, ...] = ()
    agent_names: tuple[str, ...] = ()
    #: It reaches the network: its rules name domains (``WebFetch(domain:pypi.org)``).
    network: bool = False

    @property
    def safety(self) -> ToolSafety:
        """The hints of :attr:`access`: a read changes nothing, a command may reach anything."""
        return ToolSafety(
            read_only=self.access == "read",
            destructive=self.access != "read",
            idempotent=self.idempotent,
            open_world=self.access == "run" or self.network,
            permission=self.permission,
        )

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
    access="read",
    permission="Read",
    idempotent=True,
    path_arg=PathArg(),
    agent_names=("Read",),
)
WRITE_FILE = BuiltinSpec(
    "write_file",
    "Create or overwrite a file of the project with `content` (parent directories are created).",
    WriteFileInput,
    WriteFileOutput,
    access="write",
    permission="Edit",
    idempotent=True,  # the same content written again leaves the same file
    path_arg=PathArg(),
    agent_names=("Write",),
)
EDIT_FILE = BuiltinSpec(
    "edit_file",
    "Replace the exact text `old_string` by `new_string` in a file. `old_string` must occur exactly once "
    "unless `replace_all` is true.",
    EditFileInput,
    EditFileOutput,
    access="write",
    permission="Edit",
    idempotent=False,
    path_arg=PathArg(),
    agent_names=("Edit", "MultiEdit"),
)
LIST_DIR = BuiltinSpec(
    "list_dir",
    "List the entries of a directory of the project (name, type, size).",
    ListDirInput,
    ListDirOutput,
    access="read",
    permission="Read",
    idempotent=True,
    path_arg=PathArg(default="."),
    rule_names=("LS",),
    agent_names=("LS",),
)
GLOB = BuiltinSpec(
    "glob",
    "Find files of the project whose path (relative to `path`) matches a glob such as **/*.py.",
    GlobInput,
    GlobOutput,
    access="read",
    permission="Read",
    idempotent=True,
    path_arg=PathArg(default="."),
    rule_names=("Glob",),
    agent_names=("Glob",),
)
GREP = BuiltinSpec(
    "grep",
    "Search file contents with a regular expression; returns path, line number and line for each match. "
    "`glob` filters the files searched.",
    GrepInput,
    GrepOutput,
    access="read",
    permission="Read",
    idempotent=True,
    path_arg=PathArg(default="."),
    rule_names=("Grep",),
    agent_names=("Grep",),
)
BASH = BuiltinSpec(
    "bash",
    "Run a bash command in the project root (non-interactive, stdin empty, output capped, time-limited). "
    "Each command it contains must be allowed by the project's permissions.",
    BashInput,
    BashOutput,
    # any command: it may change or delete anything it can reach, and reach the network
    access="run",
    permission="Bash",
    idempotent=False,
    agent_names=("Bash",),
)

WEB_FETCH = BuiltinSpec(
    "web_fetch",
    "Fetch a web page (http or https) and return it as readable text (HTML as markdown), with its final "
    "URL and status. Redirects are followed only to allowed hosts; size and time are capped.",
    WebFetchInput,
    WebFetchOutput,
    access="read",  # it changes nothing of the project
    permission="WebFetch",
    idempotent=True,
    agent_names=("WebFetch",),
    network=True,
)

#: Every built-in tool, in catalog order.
BUILTIN_SPECS: tuple[BuiltinSpec, ...] = (
    READ_FILE,
    WRITE_FILE,
    EDIT_FILE,
    LIST_DIR,
    GLOB,
    GREP,
    BASH,
    WEB_FETCH,
)
#: The same, by name.
BUILTIN_BY_NAME: Final[dict[str, BuiltinSpec]] = {t.name: t for t in BUILTIN_SPECS}


def builtin_specs() -> list[dict[str, Any]]:
    """The spec of every built-in tool (name, description, input and output schemas, safety)."""
    return [t.spec() for t in BUILTIN_SPECS]
