"""``.mcp.json``: the MCP servers of a project, in Claude Code's format (pure parsing, plus the read).

::

    {"mcpServers": {
        "time": {"command": "python", "args": ["-m", "mcp_server_time"], "env": {"TZ": "UTC"}},
        "docs": {"type": "http", "url": "https://example.com/mcp", "headers": {"Authorization": "…"}}
    }}

Two layers: the global one (``<global home>/.mcp.json``, ``~/.jido_code`` by default) and the
project root's ``.mcp.json``; a project server of the same name replaces the global one. The
project layer counts only when the user trusts the project (``shared/trust.py``); untrusted,
its servers are reported, never started. An HTTP server of the project layer is a URL the
runner itself would request: it is started only once the user approved that URL
(:func:`withhold_unapproved`, ``approvals.py``).

A bad file, or a bad server entry, is a :class:`ConfigProblem` naming the file and the field;
it never hides the other servers: each entry is validated on its own.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Annotated, Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, field_validator

__all__ = [
    "MAX_CONFIG_BYTES",
    "MAX_SERVERS",
    "SERVER_NAME",
    "ConfigProblem",
    "HttpServer",
    "McpConfig",
    "ServerConfig",
    "StdioServer",
    "load_config",
    "parse_config",
    "withhold_unapproved",
]

#: A ``.mcp.json`` larger than this is not read.
MAX_CONFIG_BYTES: Final = 256 * 1024
#: At most this many servers per layer (the rest are reported, not started).
MAX_SERVERS: Final = 32
#: A server's name: it becomes part of tool names (``mcp__<server>__<tool>``), so no ``__``.
SERVER_NAME: Final = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,47}$")
_ENV_NAME: Final = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class StdioServer(BaseModel):
    """A server run as a process, spoken to over its stdin and stdout (inside the OS sandbox)."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    type: Literal["stdio"] = "stdio"
    command: str = Field(min_length=1, max_length=4096)
    args: list[Annotated[str, Field(max_length=4096)]] = Field(default_factory=list, max_length=256)
    env: dict[str, Annotated[str, Field(max_length=8192)]] = Field(default_factory=dict, max_length=128)

    @field_validator("command")
    @classmethod
    def _command_ok(cls, value: str) -> str:
        if "\x00" in value or value != value.strip():
            raise ValueError("must be a program name or path without NUL or surrounding spaces")
        return value

    @field_validator("env")
    @classmethod
    def _env_ok(cls, value: dict[str, str]) -> dict[str, str]:
        for key, item in value.items():
            if not _ENV_NAME.match(key):
                raise ValueError(f"{key!r} is not a variable name (letters, digits, _)")
            if "\x00" in item:
                raise ValueError(f"the value of {key} contains NUL")
        return value


class HttpServer(BaseModel):
    """A server reached over streamable HTTP."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    type: Literal["http"]
    url: str = Field(max_length=4096)
    headers: dict[str, Annotated[str, Field(max_length=8192)]] = Field(default_factory=dict, max_length=64)

    @field_validator("url")
    @classmethod
    def _url_ok(cls, value: str) -> str:
        if not re.match(r"^https?://[^/\s]+", value):
            raise ValueError("must be an http:// or https:// URL")
        return value


ServerConfig = Annotated[StdioServer | HttpServer, Field(discriminator="type")]
_SERVER: TypeAdapter[StdioServer | HttpServer] = TypeAdapter(ServerConfig)


class ConfigProblem(BaseModel):
    """Why a file or one server of it is not used."""

    model_config = ConfigDict(frozen=True)

    file: str
    server: str = ""
    problem: str

    def __str__(self) -> str:
        where = f"{self.file}: mcpServers.{self.server}" if self.server else self.file
        return f"{where}: {self.problem}"


class McpConfig(BaseModel):
    """The servers a project may start, where each came from, and what was wrong."""

    model_config = ConfigDict(frozen=True)

    servers: dict[str, StdioServer | HttpServer] = Field(default_factory=dict)
    #: ``global`` or ``project`` for each server.
    layer: dict[str, str] = Field(default_factory=dict)
    problems: list[ConfigProblem] = Field(default_factory=list)
    #: Servers of an untrusted project's ``.mcp.json``: listed, not started.
    untrusted: list[str] = Field(default_factory=list)
    #: HTTP servers of the project layer the user has not approved at their URL: listed (with
    #: the URL), not started (:func:`withhold_unapproved`).
    awaiting_approval: dict[str, str] = Field(default_factory=dict)


def _explain(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors():
        loc = ".".join(str(p) for p in err["loc"] if p not in ("stdio", "http"))
        parts.append(f"{loc or 'entry'}: {err['msg']}")
    return "; ".join(parts)


def parse_config(raw: bytes, file: str) -> tuple[dict[str, StdioServer | HttpServer], list[ConfigProblem]]:
    """The valid servers of one ``.mcp.json`` and a problem for each invalid one (or the whole file)."""
    try:
        doc = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        return {}, [ConfigProblem(file=file, problem=f"not valid JSON: {exc}")]
    if not isinstance(doc, Mapping):
        return {}, [ConfigProblem(file=file, problem="must be a JSON object with an mcpServers object")]
    entries = doc.get("mcpServers", {})
    if not isinstance(entries, Mapping):
        return {}, [ConfigProblem(file=file, problem="mcpServers: must be an object of servers by name")]
    servers: dict[str, StdioServer | HttpServer] = {}
    problems: list[ConfigProblem] = []
    for index, (name, entry) in enumerate(entries.items()):
        if index >= MAX_SERVERS:
            problems.append(
                ConfigProblem(file=file, server=name, problem=f"more than {MAX_SERVERS} servers: not started")
            )
            continue
        if not SERVER_NAME.match(name) or "__" in name:
            problems.append(
                ConfigProblem(
                    file=file,
                    server=name,
                    problem="invalid server name (letters, digits, '-', '_', at most 48, no '__')",
                )
            )
            continue
        servers_entry: Any = dict(entry) if isinstance(entry, Mapping) else entry
        if isinstance(servers_entry, dict) and "type" not in servers_entry and "command" in servers_entry:
            servers_entry["type"] = "stdio"
        if isinstance(servers_entry, dict) and servers_entry.get("type") == "streamable-http":
            servers_entry["type"] = "http"
        try:
            servers[name] = _SERVER.validate_python(servers_entry)
        except ValidationError as exc:
            problems.append(ConfigProblem(file=file, server=name, problem=_explain(exc)))
    return servers, problems


def _read(path: Path) -> tuple[bytes | None, ConfigProblem | None]:
    try:
        if not path.is_file():
            return None, None
        if path.stat().st_size > MAX_CONFIG_BYTES:
            return None, ConfigProblem(
                file=str(path), problem=f"larger than {MAX_CONFIG_BYTES} bytes, not read"
            )
        return path.read_bytes(), None
    except OSError as exc:
        return None, ConfigProblem(file=str(path), problem=f"cannot read: {exc.strerror or exc}")


def load_config(root: Path | None, *, global_home: Path, trusted: bool) -> McpConfig:
    """The servers of the global layer and, when ``trusted``, of ``root``'s ``.mcp.json``. Never raises."""
    servers: dict[str, StdioServer | HttpServer] = {}
    layer: dict[str, str] = {}
    problems: list[ConfigProblem] = []
    untrusted: list[str] = []
    layers = [("global", global_home / ".mcp.json")]
    if root is not None:
        layers.append(("project", root / ".mcp.json"))
    for name, path in layers:
        raw, problem = _read(path)
        if problem is not None:
            problems.append(problem)
        if raw is None:
            continue
        found, bad = parse_config(raw, str(path))
        problems.extend(bad)
        if name == "project" and not trusted:
            untrusted = sorted(found)
            continue
        for server, cfg in found.items():
            servers[server] = cfg
            layer[server] = name
    return McpConfig(servers=servers, layer=layer, problems=problems, untrusted=untrusted)


def withhold_unapproved(config: McpConfig, approved: Callable[[str, str], bool]) -> McpConfig:
    """``config`` without the project layer's HTTP servers whose URL ``approved(name, url)`` denies;
    those move to :attr:`McpConfig.awaiting_approval` (pure but for ``approved``)."""
    waiting = {
        name: cfg.url
        for name, cfg in config.servers.items()
        if isinstance(cfg, HttpServer) and config.layer.get(name) == "project" and not approved(name, cfg.url)
    }
    if not waiting:
        return config
    return config.model_copy(
        update={
            "servers": {n: c for n, c in config.servers.items() if n not in waiting},
            "layer": {n: layer for n, layer in config.layer.items() if n not in waiting},
            "awaiting_approval": waiting,
        }
    )
