"""The input model of every built-in tool: what the model may send, as a JSON schema.

Pure pydantic models. The project service shows their schemas in the tool
catalog; the tool runner validates each call's arguments against them.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

__all__ = [
    "BashInput",
    "EditFileInput",
    "GlobInput",
    "GrepInput",
    "ListDirInput",
    "ReadFileInput",
    "ToolInput",
    "WebFetchInput",
    "WriteFileInput",
]


class ToolInput(BaseModel):
    """Base of tool inputs: unknown fields are refused (the model sees the schema)."""

    model_config = ConfigDict(frozen=True, extra="forbid")


class ReadFileInput(ToolInput):
    path: str = Field(description="file path, relative to the project root", min_length=1, max_length=4096)
    offset: int = Field(default=1, ge=1, description="first line to return (1-based)")
    limit: int = Field(default=2000, ge=1, le=100_000, description="number of lines to return")


class WriteFileInput(ToolInput):
    path: str = Field(description="file path, relative to the project root", min_length=1, max_length=4096)
    content: str = Field(description="the whole new content of the file")


class EditFileInput(ToolInput):
    path: str = Field(description="file path, relative to the project root", min_length=1, max_length=4096)
    old_string: str = Field(min_length=1, description="exact text to replace (must occur exactly once)")
    new_string: str = Field(description="replacement text")
    replace_all: bool = Field(default=False, description="replace every occurrence instead of exactly one")


class ListDirInput(ToolInput):
    path: str = Field(default=".", description="directory, relative to the project root", max_length=4096)


class GlobInput(ToolInput):
    pattern: str = Field(
        min_length=1, max_length=1024, description="glob such as **/*.py (** spans directories)"
    )
    path: str = Field(default=".", max_length=4096, description="directory to search from")
    max_results: int = Field(default=500, ge=1, le=10_000)


class GrepInput(ToolInput):
    pattern: str = Field(min_length=1, max_length=1024, description="Python regular expression")
    path: str = Field(default=".", max_length=4096, description="file or directory to search")
    glob: str | None = Field(
        default=None, max_length=1024, description="only files matching this glob (e.g. *.py)"
    )
    case_insensitive: bool = False
    max_results: int = Field(default=200, ge=1, le=10_000)


class BashInput(ToolInput):
    command: str = Field(min_length=1, max_length=64 * 1024, description="the bash command to run")
    timeout_s: float | None = Field(
        default=None,
        gt=0,
        le=3600,
        description="seconds before the command is killed (capped by the project)",
    )
    description: str | None = Field(default=None, max_length=500, description="what the command is for")


class WebFetchInput(ToolInput):
    url: str = Field(min_length=1, max_length=8192, description="the http:// or https:// URL to fetch")
    max_bytes: int = Field(
        default=1024 * 1024,
        ge=1024,
        le=10 * 1024 * 1024,
        description="stop reading the body after this many bytes",
    )
