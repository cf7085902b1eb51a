"""The loop's configuration: ``$XDG_CONFIG_HOME/daedalus/config.toml`` (or ``~/.config/…``) under
the ``prd`` key of JidoCode's settings (global, then the project's when trusted).

Layers, lowest first; a later layer wins key by key (tables merge, lists are replaced)::

    defaults (PrdConfig())
    $XDG_CONFIG_HOME/daedalus/config.toml   the seed's global file (else ~/.config/daedalus/…)
    <jido_home>/settings.json  "prd": {…}   JidoCode's global settings
    <root>/.jido_code/settings.json "prd"   the project's layers, only when the user trusts
    <root>/.jido/settings.json      "prd"   the project (shared/trust.py)

Every layer has the same keys (snake_case; ``docs/prd-config.md``). Unknown keys and values of
the wrong type are refused: a bad file is ``InvalidInput`` naming the file and the dotted field
(``retry.retry_delays[1]``), because a loop that commits code must not run on a configuration
different from the one the user wrote.

An untrusted project's ``prd`` key is ignored as a whole and reported in
:attr:`LoadedConfig.ignored` (docs/decisions/0270-prd-config-layers-and-trust.md): project files
are untrusted input until the user trusts the project, and this configuration names commands to
run (``quality_commands``, providers' ``command``/``args``/``env``) and allows destructive git.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Final, Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError, model_validator

from jidocode.shared.errors import InvalidInput
from jidocode.shared.settings import (
    MAX_SETTINGS_BYTES,
    deep_merge,
    global_home,
    parse_settings_bytes,
    settings_files,
)
from jidocode.shared.trust import trust_state

from .retry import MAX_DELAY_S, MAX_RETRIES, RetryPolicy

__all__ = [
    "DOCUMENTED_KEYS",
    "MAX_CONFIG_BYTES",
    "NOTIFY_STATES",
    "PROTECTED_KEYS",
    "LoadedConfig",
    "NotifyHook",
    "NotifyState",
    "PrdConfig",
    "ProviderSettings",
    "PushSettings",
    "config_toml_path",
    "config_warnings",
    "doctor_check",
    "load_config",
    "load_config_report",
]

#: ``config.toml`` larger than this is refused unread.
MAX_CONFIG_BYTES: Final = 1024 * 1024
#: Keys an untrusted project could use to run something or to widen what the loop may do; with the
#: project untrusted its whole ``prd`` key is ignored, these are named in the warning.
PROTECTED_KEYS: Final = (
    "quality_commands",
    "providers.<key>.command",
    "providers.<key>.args",
    "providers.<key>.env",
    "allow_destructive_git",
    "notify",
    "push",
)
MAX_TIMEOUT_S: Final = 24 * 3600.0
_KEY = r"^[A-Za-z0-9_\-]{1,64}$"

Command = Annotated[str, StringConstraints(min_length=1, max_length=4096)]
Timeout = Annotated[float, Field(gt=0.0, le=MAX_TIMEOUT_S, allow_inf_nan=False)]
ProviderKey = Annotated[str, StringConstraints(pattern=_KEY)]
#: ``approvalPolicy`` / ``sandboxPolicy`` words (``on-request``, ``workspace-write`` …); the provider
#: maps them, this only keeps them to one plain word.
Policy = Annotated[str, StringConstraints(pattern=r"^[a-z][a-z0-9_\-]{0,63}$")]
EnvName = Annotated[str, StringConstraints(pattern=r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")]
EnvValue = Annotated[str, StringConstraints(max_length=32768)]


class ProviderSettings(BaseModel):
    """One provider's configuration (``[providers.<key>]``)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    #: The CLI to run (codex/claude/gemini); empty: the provider's default name on PATH.
    command: Annotated[str, StringConstraints(max_length=4096)] = ""
    #: Extra arguments placed before the provider's own.
    args: list[Annotated[str, StringConstraints(max_length=4096)]] = Field(
        default_factory=list, max_length=64
    )
    model: Annotated[str, StringConstraints(max_length=200)] = ""
    #: Extra environment for the CLI (API keys by reference are the user's business).
    env: dict[EnvName, EnvValue] = Field(default_factory=dict, max_length=64)
    timeout_s: Timeout = 1800.0
    #: The CLI's own login: its credential files readable (read-only) and its API hosts
    #: reachable, for its process only (``providers/login.py``); from the user's layers only.
    use_login: bool = False


NotifyState = Literal["completed", "error", "paused"]
#: The loop states a notice can be sent on.
NOTIFY_STATES: Final[tuple[NotifyState, ...]] = ("completed", "error", "paused")
MAX_NOTIFY_TIMEOUT_S: Final = 120.0


class NotifyHook(BaseModel):
    """One notice (``notify[]``): a command run in the sandbox, or a webhook the service POSTs to."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    #: The loop states that send it.
    on: list[NotifyState] = Field(default_factory=lambda: list(NOTIFY_STATES), min_length=1, max_length=3)
    #: Run as ``bash -c <command> notify <state> <prd> <reason>`` in the work dir, sandboxed like a check.
    command: Annotated[str, StringConstraints(max_length=4096)] = ""
    #: An ``http://`` or ``https://`` URL; the notice is POSTed to it as JSON (no redirects).
    url: Annotated[str, StringConstraints(max_length=2048)] = ""
    timeout_s: float = Field(default=10.0, gt=0.0, le=MAX_NOTIFY_TIMEOUT_S, allow_inf_nan=False)

    @model_validator(mode="after")
    def _one_target(self) -> NotifyHook:
        if bool(self.command.strip()) == bool(self.url):
            raise ValueError("a notify hook has exactly one of command and url")
        if self.url:
            parts = urlsplit(self.url)
            if parts.scheme not in ("http", "https") or not parts.hostname:
                raise ValueError(f"notify url {self.url[:200]!r} is not an http(s) URL with a host")
        return self


HostName = Annotated[str, StringConstraints(pattern=r"^[a-z0-9]([a-z0-9.-]{0,251}[a-z0-9])?$")]


class PushSettings(BaseModel):
    """How ``prd finish --push`` reaches a network remote (``push``); from the user's layers only."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    #: Host -> the name of the PRD service's environment variable holding the token sent to that
    #: host (and no other) as ``Authorization: Basic`` (docs/prd.md, decision 0343).
    tokens: dict[HostName, EnvName] = Field(default_factory=dict, max_length=64)
    #: Hosts a push may reach over plain ``http://`` (unencrypted); others are refused.
    plain_http: list[HostName] = Field(default_factory=list, max_length=64)


class PrdConfig(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    provider: str = Field(default="jidocode", pattern=_KEY)
    model: Annotated[str, StringConstraints(max_length=200)] = ""
    retry: RetryPolicy = RetryPolicy()
    #: Quality commands, run in the work dir inside the sandbox after each iteration, in order.
    quality_commands: list[Command] = Field(default_factory=list, max_length=64)
    check_timeout_s: Timeout = 600.0
    check_output_cap: int = Field(default=65536, ge=1024, le=16 * 1024 * 1024)
    iteration_timeout_s: Timeout = 1800.0
    approval_policy: Policy = "never"
    sandbox_policy: Policy = "workspace-write"
    #: Commit each passed story.
    commit: bool = True
    #: Commit the PRD's own files (``prd.json``, ``progress.md``, ``prd.md``) with each story.
    commit_prd_files: bool = True
    #: A loop pauses before an iteration past this many (unset: no limit).
    max_iterations: int | None = Field(default=None, ge=1, le=1_000_000)
    #: A loop pauses once its iterations cost this much in US dollars (unset: no limit).
    max_cost_usd: float | None = Field(default=None, gt=0.0, le=1_000_000.0, allow_inf_nan=False)
    #: Notices when the loop completes, fails or pauses (none by default).
    notify: list[NotifyHook] = Field(default_factory=list, max_length=16)
    #: Destructive git actions (removing a worktree with changes, deleting a branch) allowed.
    allow_destructive_git: bool = False
    providers: dict[ProviderKey, ProviderSettings] = Field(default_factory=dict, max_length=32)
    #: A push to a network remote: its tokens and plain-http hosts (your own layers only).
    push: PushSettings = PushSettings()


class LoadedConfig(BaseModel):
    """The effective configuration and where it came from."""

    model_config = ConfigDict(frozen=True)

    config: PrdConfig
    #: The files that exist and were read, lowest layer first.
    files: list[str] = Field(default_factory=list)
    #: Why a layer did not count (an untrusted project's ``prd`` key), one line each.
    ignored: list[str] = Field(default_factory=list)
    trusted: bool | None = None


# --- one layer as written -----------------------------------------------------------------------------

_STRICT = ConfigDict(extra="forbid", strict=True)


class _RetryLayer(BaseModel):
    model_config = _STRICT

    max_retries: int = Field(default=3, ge=0, le=MAX_RETRIES)
    #: Seconds.
    retry_delays: list[Annotated[float, Field(ge=0.0, le=MAX_DELAY_S, allow_inf_nan=False)]] = Field(
        default_factory=list, max_length=MAX_RETRIES
    )


class _ProviderLayer(ProviderSettings):
    model_config = _STRICT


class _NotifyLayer(NotifyHook):
    model_config = _STRICT


class _PushLayer(PushSettings):
    model_config = _STRICT


class _Layer(PrdConfig):
    """The keys of ``config.toml`` and of the ``prd`` settings key: :class:`PrdConfig`'s, strict,
    with ``retry.retry_delays`` in seconds as the seed spells it."""

    model_config = _STRICT

    retry: _RetryLayer = _RetryLayer()  # type: ignore[assignment]
    providers: dict[ProviderKey, _ProviderLayer] = Field(default_factory=dict, max_length=32)  # type: ignore[assignment]
    notify: list[_NotifyLayer] = Field(default_factory=list, max_length=16)  # type: ignore[assignment]
    push: _PushLayer = _PushLayer()


def _dotted(loc: tuple[int | str, ...]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _check_layer(value: Mapping[str, Any], file: str, prefix: str) -> dict[str, Any]:
    """``value`` when it is a valid layer (only the keys it sets); else ``InvalidInput``."""
    try:
        _Layer.model_validate(value)
    except ValidationError as exc:
        errors = exc.errors(include_url=False)
        err = errors[0]
        field = _dotted((*((prefix,) if prefix else ()), *err["loc"]))
        more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
        raise InvalidInput(
            f"{file}: {field}: {err['msg']}{more}",
            details={"file": file, "field": field, "problem": str(err["msg"])},
        ) from None
    return dict(value)


# --- the layers -----------------------------------------------------------------------------------


def config_toml_path(env: Mapping[str, str]) -> Path:
    """``$XDG_CONFIG_HOME/daedalus/config.toml`` (an absolute ``XDG_CONFIG_HOME`` only, as the XDG
    spec says), else ``$HOME/.config/daedalus/config.toml``."""
    xdg = env.get("XDG_CONFIG_HOME", "")
    if xdg and os.path.isabs(xdg):
        return Path(xdg) / "daedalus" / "config.toml"
    home = env.get("HOME") or str(Path.home())
    return Path(home) / ".config" / "daedalus" / "config.toml"


def _read_limited(path: Path, limit: int) -> bytes | None:
    """The file's bytes, ``None`` when it does not exist; ``InvalidInput`` when unreadable or large."""
    try:
        with open(path, "rb") as fh:
            raw = fh.read(limit + 1)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as exc:
        raise InvalidInput(
            f"{path}: cannot read: {exc.strerror or exc}", details={"file": str(path)}
        ) from None
    if len(raw) > limit:
        raise InvalidInput(f"{path}: larger than {limit} bytes, not read", details={"file": str(path)})
    return raw


def _toml_layer(path: Path) -> dict[str, Any] | None:
    raw = _read_limited(path, MAX_CONFIG_BYTES)
    if raw is None:
        return None
    try:
        value = tomllib.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise InvalidInput(
            f"{path}: not valid UTF-8 at byte {exc.start}", details={"file": str(path)}
        ) from None
    except tomllib.TOMLDecodeError as exc:
        raise InvalidInput(f"{path}: invalid TOML: {exc}", details={"file": str(path)}) from None
    return _check_layer(value, str(path), "")


def _settings_layer(path: Path) -> dict[str, Any] | None:
    """The ``prd`` key of one settings file (``None``: no file or no key)."""
    raw = _read_limited(path, MAX_SETTINGS_BYTES)
    if raw is None:
        return None
    value, diags = parse_settings_bytes(raw, str(path))
    if value is None:
        problem = "; ".join(
            d.problem + (f" (line {d.line}, column {d.column})" if d.line is not None else "")
            for d in diags
            if d.severity != "warning"
        )
        problem = problem or "unusable"
        raise InvalidInput(f"{path}: {problem}", details={"file": str(path)})
    prd = value.get("prd")
    if prd is None:
        return None
    if not isinstance(prd, dict):
        raise InvalidInput(f"{path}: prd: must be an object", details={"file": str(path), "field": "prd"})
    return _check_layer(prd, str(path), "prd")


def _to_config(merged: Mapping[str, Any]) -> PrdConfig:
    data = dict(merged)
    retry = data.pop("retry", None)
    if retry is not None:
        policy: dict[str, Any] = {}
        if "max_retries" in retry:
            policy["max_retries"] = retry["max_retries"]
        if "retry_delays" in retry:
            policy["retry_delays_s"] = retry["retry_delays"]
        data["retry"] = RetryPolicy(**policy)
    return PrdConfig.model_validate(data)


def _without_use_login(layer: dict[str, Any], path: Path, ignored: list[str]) -> dict[str, Any]:
    """A project layer without ``providers.<key>.use_login`` (each one named in ``ignored``):
    only the user opens a CLI's login to the project's loops, never the project itself."""
    providers = layer.get("providers")
    if not isinstance(providers, dict):
        return layer
    kept: dict[str, Any] = {}
    for key, table in providers.items():
        if isinstance(table, dict) and "use_login" in table:
            ignored.append(
                f"{path}: prd.providers.{key}.use_login: ignored, only your own settings "
                "(~/.config/daedalus/config.toml or the global settings.json) give a CLI its login"
            )
            table = {k: v for k, v in table.items() if k != "use_login"}
        kept[key] = table
    return {**layer, "providers": kept}


def _without_push(layer: dict[str, Any], path: Path, ignored: list[str]) -> dict[str, Any]:
    """A project layer without ``push`` (named in ``ignored``): a project never says which host
    gets a token of the service's environment, nor that a push may go unencrypted."""
    if "push" not in layer:
        return layer
    ignored.append(
        f"{path}: prd.push: ignored, only your own settings (~/.config/daedalus/config.toml or the "
        "global settings.json) say where a push may send a token or go over plain http"
    )
    return {k: v for k, v in layer.items() if k != "push"}


def load_config_report(
    root: str | None, *, env: Mapping[str, str] | None = None, jido_home: str | None = None
) -> LoadedConfig:
    """:func:`load_config` with the files read and the layers ignored (``root`` ``None``: global only)."""
    environ = os.environ if env is None else env
    home = Path(jido_home) if jido_home else None
    if home is None and environ.get("JIDO_CODE_HOME"):
        home = Path(environ["JIDO_CODE_HOME"]).expanduser()
    home = global_home(home)
    merged: dict[str, Any] = {}
    files: list[str] = []
    ignored: list[str] = []

    toml_path = config_toml_path(environ)
    layer = _toml_layer(toml_path)
    if layer is not None:
        files.append(str(toml_path))
        merged = deep_merge(merged, layer)

    settings = settings_files(Path(root) if root else None, jido_home=home)
    trusted: bool | None = None
    if root:
        trusted = trust_state(root, home=home).trusted
    for index, path in enumerate(settings):
        layer = _settings_layer(path)
        if layer is None:
            continue
        files.append(str(path))
        if index > 0 and not trusted:
            ignored.append(
                f"{path}: prd: ignored, the project is not trusted (it could set "
                f"{', '.join(PROTECTED_KEYS)}); run `jidocode projects trust {os.path.realpath(root or '.')}`"
            )
            continue
        if index > 0:
            layer = _without_push(_without_use_login(layer, path, ignored), path, ignored)
        merged = deep_merge(merged, layer)
    return LoadedConfig(config=_to_config(merged), files=files, ignored=ignored, trusted=trusted)


def config_warnings(loaded: LoadedConfig) -> list[str]:
    """What a user starting a loop under ``loaded`` should know: no quality commands (a story
    then passes on the provider's word and a change alone), and each layer ignored."""
    out: list[str] = []
    if not loaded.config.quality_commands:
        out.append(
            "no quality commands are configured (prd.quality_commands): a story passes on the "
            "provider's word and a change alone, nothing checks it"
        )
    return out + list(loaded.ignored)


def doctor_check(root: str | None) -> dict[str, Any]:
    """The ``prd`` line of ``jidocode doctor`` for project ``root``: ``warn`` naming what
    :func:`config_warnings` says (no quality commands, a layer ignored) or a layer that is not
    valid (the loop refuses to run on it), else ``ok`` with the checks and layers read."""
    try:
        loaded = load_config_report(root)
    except InvalidInput as exc:
        return {"name": "prd", "status": "warn", "detail": exc.message, "fix": "fix the key named"}
    warnings = config_warnings(loaded)
    if warnings:
        fix = "set prd.quality_commands (docs/prd-config.md)"
        return {"name": "prd", "status": "warn", "detail": "; ".join(warnings), "fix": fix}
    read = ", ".join(loaded.files) or "no file"
    detail = f"{len(loaded.config.quality_commands)} quality command(s) from {read}"
    return {"name": "prd", "status": "ok", "detail": detail, "fix": None}


def load_config(
    root: str, *, env: Mapping[str, str] | None = None, jido_home: str | None = None
) -> PrdConfig:
    """The effective configuration for project ``root``; ``InvalidInput`` naming the file and field."""
    return load_config_report(root, env=env, jido_home=jido_home).config


#: The sections of ``docs/prd-config.md``, checked against the model by a test.
DOCUMENTED_KEYS: Final[tuple[str, ...]] = (
    "provider",
    "model",
    "quality_commands",
    "check_timeout_s",
    "check_output_cap",
    "iteration_timeout_s",
    "approval_policy",
    "sandbox_policy",
    "commit",
    "commit_prd_files",
    "allow_destructive_git",
    "max_iterations",
    "max_cost_usd",
    "notify",
    "notify[].on",
    "notify[].command",
    "notify[].url",
    "notify[].timeout_s",
    "retry.max_retries",
    "retry.retry_delays",
    "providers.<key>.command",
    "providers.<key>.args",
    "providers.<key>.model",
    "providers.<key>.env",
    "providers.<key>.timeout_s",
    "providers.<key>.use_login",
    "push",
    "push.tokens",
    "push.plain_http",
)
