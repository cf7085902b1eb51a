"""The ``settings.json`` model: its sections, a :class:`Diagnostic` and what loading returns.

Split from :mod:`jidocode.shared.settings` (which re-exports every name here); the layers, their
merge and the trust rules are described there.
"""

from __future__ import annotations

from typing import Annotated, Any, Final, Literal

from pydantic import AfterValidator, AliasChoices, BaseModel, ConfigDict, Field, field_validator

from jidocode.shared.subjects import type_tokens

#: A settings file larger than this is not read at all (checked before decoding).
MAX_SETTINGS_BYTES: Final = 1024 * 1024

_FROZEN = ConfigDict(frozen=True, extra="ignore", populate_by_name=True)

#: The one signal bus (seed 001's ``:jido_code_bus``): NATS, subjects ``jido.>``.
SIGNAL_BUS_NAME: Final = "jido_code_bus"


class PermissionsSettings(BaseModel):
    """``permissions``: ``Tool(pattern)`` rules; deny beats ask beats allow."""

    model_config = _FROZEN

    allow: list[str] = Field(default_factory=list)
    deny: list[str] = Field(default_factory=list)
    ask: list[str] = Field(default_factory=list)
    default: Literal["deny", "ask"] = "deny"
    additional_directories: list[str] = Field(default_factory=list)


class HookSettings(BaseModel):
    """One ``pre`` or ``post`` hook (seed 001). ``data_template`` is accepted for ``data``."""

    model_config = _FROZEN

    enabled: bool = True
    signal_type: str = Field(min_length=1, max_length=256)
    bus: str = ":jido_code_bus"
    data: dict[str, Any] = Field(default_factory=dict, validation_alias=AliasChoices("data", "data_template"))

    @field_validator("signal_type")
    @classmethod
    def _publishable(cls, value: str) -> str:
        """The type becomes the subject ``jido.hook.<type>``: dotted or path-style safe tokens."""
        type_tokens(value)  # ValueError -> a validation error naming the key
        return value


class HooksSettings(BaseModel):
    """``hooks``: only ``pre`` and ``post`` exist."""

    model_config = _FROZEN

    pre: HookSettings | None = None
    post: HookSettings | None = None


class LlmSettings(BaseModel):
    """``llm``: what the conversation service needs to call a model through litellm."""

    model_config = _FROZEN

    model: str | None = None
    api_base: str | None = None
    api_key_env: str | None = None
    #: Variables a client may name as its conversation's ``api_key_env`` (``chat --api-key-env``,
    #: the SDK's ``api_key_env=``). Empty: a client may point a conversation at its own
    #: ``api_base`` (no key is sent) but never choose which secret of the conversation
    #: service's environment goes there.
    client_key_envs: list[str] = Field(default_factory=list)
    temperature: float | None = Field(default=None, ge=0.0, le=2.0)
    max_turns: int = Field(default=20, ge=1, le=1000)
    timeout_s: float = Field(default=120.0, gt=0.0, le=3600.0)
    max_retries: int = Field(default=3, ge=0, le=20)
    budget_tokens: int | None = Field(default=None, ge=1)
    budget_usd: float | None = Field(default=None, gt=0.0)
    #: Compact the context once a model call fills this share of the model's window (0: never
    #: on its own; ``/compact`` and an ``llm_context_overflow`` still do). See docs/compaction-and-replay.md.
    compact_at: float = Field(default=0.8, ge=0.0, le=1.0)
    #: The model that writes the summaries (a cheaper one); unset: the conversation's model.
    compact_model: str | None = None
    #: User turns a compaction keeps word for word.
    compact_keep_turns: int = Field(default=2, ge=1, le=100)


class ToolSettings(BaseModel):
    """``tools``: limits of the tool runner."""

    model_config = _FROZEN

    timeout_s: float = Field(default=30.0, gt=0.0, le=3600.0)
    output_cap_bytes: int = Field(default=262144, ge=1024, le=64 * 1024 * 1024)
    max_concurrent_per_project: int = Field(default=8, ge=1, le=1024)
    max_concurrent_per_conversation: int = Field(default=4, ge=1, le=1024)
    approval_timeout_s: float = Field(default=60.0, gt=0.0, le=86400.0)


def _domain_entries(entries: list[str]) -> list[str]:
    """Every entry parses as a host name, ``*.`` suffix, IP or CIDR (``ValueError`` names the bad ones)."""
    # imported here: the policy package imports the settings
    from jidocode.shared.policy.domains import parse_domain_pattern

    problems: list[str] = []
    for entry in entries:
        try:
            parse_domain_pattern(entry)
        except ValueError as exc:
            problems.append(str(exc))
    if problems:
        raise ValueError("; ".join(problems))
    return entries


class SandboxSettings(BaseModel):
    """``sandbox``: the OS sandbox of every process a tool starts (see :mod:`jidocode.shared.sandbox`).

    ``mode: "off"`` is honoured only in the user's global layer; a project
    layer can never turn the sandbox off, and can only forbid the network.
    """

    model_config = _FROZEN

    mode: Literal["auto", "bubblewrap", "landlock", "off"] = "auto"
    #: ``true``: every tool process has the whole network, no proxy (the user's global layer only).
    network: bool = False
    #: Hosts a tool process may reach through the egress proxy (docs/network.md): names,
    #: ``*.`` suffixes, IP literals, CIDRs. ``denied_domains`` wins over them.
    allowed_domains: Annotated[list[str], AfterValidator(_domain_entries)] = Field(default_factory=list)
    denied_domains: Annotated[list[str], AfterValidator(_domain_entries)] = Field(default_factory=list)


class ConversationSettings(BaseModel):
    """``conversations``: how long ended conversations are kept (decision 0325). Read from the
    user's global settings only: a project's file cannot make the engine delete."""

    model_config = _FROZEN

    #: Conversations no replica runs and idle this many days are deleted (``None``: kept).
    retention_days: float | None = Field(default=None, gt=0.0, le=36500.0)


class Settings(BaseModel):
    """The effective settings of one project (or of the global layer alone)."""

    model_config = _FROZEN

    version: str | None = None
    signal_bus: dict[str, Any] = Field(default_factory=dict)
    permissions: PermissionsSettings = Field(default_factory=PermissionsSettings)
    hooks: HooksSettings = Field(default_factory=HooksSettings)
    llm: LlmSettings = Field(default_factory=LlmSettings)
    tools: ToolSettings = Field(default_factory=ToolSettings)
    sandbox: SandboxSettings = Field(default_factory=SandboxSettings)
    conversations: ConversationSettings = Field(default_factory=ConversationSettings)
    data_dir: str = ".jido"


class Diagnostic(BaseModel):
    """A problem found in one file: which file, where in it, which key (if any), what is wrong."""

    model_config = ConfigDict(frozen=True)

    file: str
    key: str | None = None
    problem: str
    severity: Literal["error", "warning"] = "error"
    #: Where in the file (1-based, as an editor shows it): the syntax error, or the key named.
    line: int | None = None
    column: int | None = None

    @property
    def where(self) -> str:
        """``file:line:column`` (or ``file`` when the position is not known)."""
        if self.line is None:
            return self.file
        return f"{self.file}:{self.line}:{self.column or 1}"

    def __str__(self) -> str:
        return f"{self.where}: " + (f"{self.key}: " if self.key else "") + self.problem


class LoadedSettings(BaseModel):
    """The merged settings, what was wrong on the way, and the files that were read."""

    model_config = ConfigDict(frozen=True)

    settings: Settings
    diagnostics: list[Diagnostic] = Field(default_factory=list)
    files: list[str] = Field(default_factory=list)
    #: Whether the project layer counted in full (``None``: no project, the global layer only).
    trusted: bool | None = None
    #: The errors in the settings files themselves (a file that cannot be read or decoded, a
    #: key whose value is invalid): while there is one, the settings are unusable and whoever
    #: needs them refuses (:func:`require_usable`), rather than run on what is left.
    broken: list[Diagnostic] = Field(default_factory=list)
