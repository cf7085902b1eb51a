"""``settings.json``: the model, the layers and their merge (seeds 000 and 001).

Layers, lowest first (a later layer wins, key by key)::

    <jido_home>/settings.json            global: jido_home, else $JIDO_CODE_HOME, else ~/.jido_code
    <root>/.jido_code/settings.json      project, seed 001 spelling
    <root>/<data_dir>/settings.json      project data dir (default .jido), seed 000 spelling

Objects merge recursively by key; lists and scalars are replaced. The
environment has the last word for ``JIDO_LLM_MODEL`` and ``JIDO_LLM_API_BASE``.

Nothing here raises on bad input: a file that cannot be read or decoded, or a
key whose value is invalid, becomes a :class:`Diagnostic` naming the file, the
key and the problem, and that key falls back to the value of the lower layer
(or the default). Unknown top-level keys (``$schema`` …) are ignored; unknown
keys inside a known section are ignored with a warning.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Final, Literal

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, field_validator

from jidocode.shared.subjects import type_tokens

__all__ = [
    "MAX_SETTINGS_BYTES",
    "Diagnostic",
    "HookSettings",
    "HooksSettings",
    "LlmSettings",
    "LoadedSettings",
    "PermissionsSettings",
    "SandboxSettings",
    "Settings",
    "ToolSettings",
    "deep_merge",
    "global_home",
    "load_settings",
    "merge_layers",
    "parse_settings_bytes",
    "settings_files",
]

#: A settings file larger than this is not read at all (checked before decoding).
MAX_SETTINGS_BYTES: Final = 1024 * 1024

_FROZEN = ConfigDict(frozen=True, extra="ignore", populate_by_name=True)


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
    temperature: float | None = Field(default=None, ge=0.0, le=2.0)
    max_turns: int = Field(default=20, ge=1, le=1000)
    timeout_s: float = Field(default=120.0, gt=0.0, le=3600.0)
    max_retries: int = Field(default=3, ge=0, le=20)
    budget_tokens: int | None = Field(default=None, ge=1)
    budget_usd: float | None = Field(default=None, gt=0.0)


class ToolSettings(BaseModel):
    """``tools``: limits of the tool runner."""

    model_config = _FROZEN

    timeout_s: float = Field(default=30.0, gt=0.0, le=3600.0)
    output_cap_bytes: int = Field(default=262144, ge=1024, le=64 * 1024 * 1024)
    max_concurrent_per_project: int = Field(default=8, ge=1, le=1024)
    max_concurrent_per_conversation: int = Field(default=4, ge=1, le=1024)
    approval_timeout_s: float = Field(default=60.0, gt=0.0, le=86400.0)


class SandboxSettings(BaseModel):
    """``sandbox``: the OS sandbox of every process a tool starts (see :mod:`jidocode.shared.sandbox`).

    ``mode: "off"`` is honoured only in the user's global layer; a project
    layer can never turn the sandbox off, and can only forbid the network.
    """

    model_config = _FROZEN

    mode: Literal["auto", "bubblewrap", "landlock", "off"] = "auto"
    network: bool = False


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
    data_dir: str = ".jido"


class Diagnostic(BaseModel):
    """A problem found in one file: which file, which key (if any), what is wrong."""

    model_config = ConfigDict(frozen=True)

    file: str
    key: str | None = None
    problem: str
    severity: Literal["error", "warning"] = "error"


class LoadedSettings(BaseModel):
    """The merged settings, what was wrong on the way, and the files that were read."""

    model_config = ConfigDict(frozen=True)

    settings: Settings
    diagnostics: list[Diagnostic] = Field(default_factory=list)
    files: list[str] = Field(default_factory=list)


# --- merge -----------------------------------------------------------------


def deep_merge(base: Mapping[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    """Merge ``override`` onto ``base``: objects by key (recursively), everything else replaced."""
    out: dict[str, Any] = dict(base)
    for key, value in override.items():
        old = out.get(key)
        if isinstance(old, Mapping) and isinstance(value, Mapping):
            out[key] = deep_merge(old, value)
        else:
            out[key] = value
    return out


# --- per-key validation ------------------------------------------------------

# Sections whose sub-keys are checked one by one, so one bad key keeps the rest.
_SECTIONS: Final[dict[str, type[BaseModel]]] = {
    "permissions": PermissionsSettings,
    "llm": LlmSettings,
    "tools": ToolSettings,
    "sandbox": SandboxSettings,
}
_HOOK_NAMES: Final = ("pre", "post")
_HOOK_KEYS: Final = {"enabled", "signal_type", "bus", "data", "data_template"}


def _field_adapter(model: type[BaseModel], name: str) -> TypeAdapter[Any]:
    info = model.model_fields[name]
    annotation: Any = info.annotation
    if info.metadata:
        annotation = Annotated[(annotation, *info.metadata)]
    return TypeAdapter(annotation)


_ADAPTERS: dict[tuple[type[BaseModel], str], TypeAdapter[Any]] = {}


def _check(model: type[BaseModel], name: str, value: Any) -> str | None:
    """``None`` when ``value`` is valid for ``model.name``, else the problem."""
    key = (model, name)
    adapter = _ADAPTERS.get(key)
    if adapter is None:
        adapter = _ADAPTERS[key] = _field_adapter(model, name)
    try:
        adapter.validate_python(value)
    except ValidationError as exc:
        return "; ".join(err["msg"] for err in exc.errors())
    return None


def _clean_layer(raw: Mapping[str, Any], file: str, diags: list[Diagnostic]) -> dict[str, Any]:
    """Keep only the valid keys of one layer, reporting each invalid one."""
    clean: dict[str, Any] = {}
    for top in ("version", "signal_bus", "data_dir"):
        if top in raw:
            problem = _check(Settings, top, raw[top])
            if problem is None:
                clean[top] = raw[top]
            else:
                diags.append(Diagnostic(file=file, key=top, problem=problem))
    for section, model in _SECTIONS.items():
        if section not in raw:
            continue
        value = raw[section]
        if not isinstance(value, Mapping):
            diags.append(Diagnostic(file=file, key=section, problem="must be an object"))
            continue
        kept: dict[str, Any] = {}
        for sub, sub_value in value.items():
            path = f"{section}.{sub}"
            if not isinstance(sub, str) or sub not in model.model_fields:
                diags.append(
                    Diagnostic(file=file, key=path, problem="unknown key, ignored", severity="warning")
                )
                continue
            problem = _check(model, sub, sub_value)
            if problem is None:
                kept[sub] = sub_value
            else:
                diags.append(Diagnostic(file=file, key=path, problem=problem))
        clean[section] = kept
    if "hooks" in raw:
        hooks = raw["hooks"]
        if not isinstance(hooks, Mapping):
            diags.append(Diagnostic(file=file, key="hooks", problem="must be an object"))
        else:
            clean["hooks"] = _clean_hooks(hooks, file, diags)
    return clean


def _clean_hooks(hooks: Mapping[str, Any], file: str, diags: list[Diagnostic]) -> dict[str, Any]:
    kept: dict[str, Any] = {}
    for name, hook in hooks.items():
        path = f"hooks.{name}"
        if name not in _HOOK_NAMES:
            diags.append(
                Diagnostic(
                    file=file,
                    key=path,
                    problem="unknown hook (only pre and post exist), ignored",
                    severity="warning",
                )
            )
            continue
        if hook is None:
            kept[name] = None
            continue
        if not isinstance(hook, Mapping):
            diags.append(Diagnostic(file=file, key=path, problem="must be an object or null"))
            continue
        fields: dict[str, Any] = {}
        for sub, sub_value in hook.items():
            sub_path = f"{path}.{sub}"
            if sub not in _HOOK_KEYS:
                diags.append(
                    Diagnostic(file=file, key=sub_path, problem="unknown key, ignored", severity="warning")
                )
                continue
            target = "data" if sub == "data_template" else sub
            problem = _check(HookSettings, target, sub_value)
            if problem is None:
                fields[target] = sub_value
            else:
                diags.append(Diagnostic(file=file, key=sub_path, problem=problem))
        kept[name] = fields
    return kept


def _finish(merged: dict[str, Any], origin: dict[str, str], diags: list[Diagnostic]) -> Settings:
    """Validate the merged dict; a hook still incomplete after the merge is dropped."""
    hooks = merged.get("hooks")
    if isinstance(hooks, dict):
        for name in _HOOK_NAMES:
            hook = hooks.get(name)
            if isinstance(hook, dict):
                try:
                    HookSettings.model_validate(hook)
                except ValidationError as exc:
                    problem = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
                    diags.append(
                        Diagnostic(
                            file=origin.get(f"hooks.{name}", "<merged>"), key=f"hooks.{name}", problem=problem
                        )
                    )
                    hooks[name] = None
    return Settings.model_validate(merged)


# --- reading files -------------------------------------------------------------


class _DuplicateKeyError(ValueError):
    pass


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise _DuplicateKeyError(f"duplicate key {key!r}")
        out[key] = value
    return out


def parse_settings_bytes(raw: bytes, file: str) -> tuple[dict[str, Any] | None, list[Diagnostic]]:
    """Decode one settings file. ``None`` (with a diagnostic) when it is unusable."""
    diags: list[Diagnostic] = []
    if len(raw) > MAX_SETTINGS_BYTES:
        return None, [
            Diagnostic(file=file, problem=f"file is larger than {MAX_SETTINGS_BYTES} bytes, not read")
        ]
    if raw.startswith(b"\xef\xbb\xbf"):
        diags.append(Diagnostic(file=file, problem="UTF-8 byte order mark, ignored", severity="warning"))
        raw = raw[3:]
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        return None, [*diags, Diagnostic(file=file, problem=f"not valid UTF-8 at byte {exc.start}")]
    if not text.strip():
        return {}, diags
    try:
        value = json.loads(text, object_pairs_hook=_no_duplicates)
    except _DuplicateKeyError as exc:
        return None, [*diags, Diagnostic(file=file, problem=str(exc))]
    except json.JSONDecodeError as exc:
        return None, [*diags, Diagnostic(file=file, problem=f"invalid JSON: {exc.msg} (line {exc.lineno})")]
    except RecursionError:
        return None, [*diags, Diagnostic(file=file, problem="JSON nested too deeply")]
    if not isinstance(value, dict):
        return None, [*diags, Diagnostic(file=file, problem="top level must be a JSON object")]
    return value, diags


def global_home(jido_home: Path | None = None) -> Path:
    """The global layer: ``jido_home``, else ``$JIDO_CODE_HOME``, else ``~/.jido_code``."""
    if jido_home is not None:
        return jido_home
    env = os.environ.get("JIDO_CODE_HOME")
    return Path(env).expanduser() if env else Path.home() / ".jido_code"


def settings_files(
    root: Path | None, *, jido_home: Path | None = None, data_dir: str = ".jido"
) -> list[Path]:
    """The settings files of every layer, lowest first (whether they exist or not)."""
    files = [global_home(jido_home) / "settings.json"]
    if root is not None:
        files.append(root / ".jido_code" / "settings.json")
        if Path(data_dir) != Path(".jido_code"):
            files.append(root / data_dir / "settings.json")
    return files


def _origins(layer: Mapping[str, Any], file: str, origin: dict[str, str]) -> None:
    hooks = layer.get("hooks")
    if isinstance(hooks, Mapping):
        for name in hooks:
            origin[f"hooks.{name}"] = file


def merge_layers(layers: list[tuple[str, Mapping[str, Any]]]) -> tuple[Settings, list[Diagnostic]]:
    """Pure core: clean each ``(file, raw dict)`` layer, merge lowest first, validate."""
    diags: list[Diagnostic] = []
    merged: dict[str, Any] = {}
    origin: dict[str, str] = {}
    for file, raw in layers:
        clean = _clean_layer(raw, file, diags)
        _origins(clean, file, origin)
        merged = deep_merge(merged, clean)
    return _finish(merged, origin, diags), diags


def _env_overrides(settings: Settings, env: Mapping[str, str]) -> Settings:
    updates: dict[str, Any] = {}
    if env.get("JIDO_LLM_MODEL"):
        updates["model"] = env["JIDO_LLM_MODEL"]
    if env.get("JIDO_LLM_API_BASE"):
        updates["api_base"] = env["JIDO_LLM_API_BASE"]
    if not updates:
        return settings
    return settings.model_copy(update={"llm": settings.llm.model_copy(update=updates)})


def load_settings(
    root: Path | None, *, jido_home: Path | None = None, data_dir: str = ".jido"
) -> LoadedSettings:
    """Read and merge every layer of ``root`` (``None``: the global layer only).

    Never raises for bad content: problems are in ``diagnostics``; ``files``
    lists the files that exist and were read.
    """
    diags: list[Diagnostic] = []
    layers: list[tuple[str, Mapping[str, Any]]] = []
    files: list[str] = []
    for path in settings_files(root, jido_home=jido_home, data_dir=data_dir):
        file = str(path)
        try:
            if not path.is_file():
                continue
            size = path.stat().st_size
            if size > MAX_SETTINGS_BYTES:
                diags.append(
                    Diagnostic(file=file, problem=f"file is larger than {MAX_SETTINGS_BYTES} bytes, not read")
                )
                continue
            raw = path.read_bytes()
        except OSError as exc:
            diags.append(Diagnostic(file=file, problem=f"cannot read: {exc.strerror or exc}"))
            continue
        files.append(file)
        value, file_diags = parse_settings_bytes(raw, file)
        diags.extend(file_diags)
        if value is not None:
            layers.append((file, value))
    settings, merge_diags = merge_layers(layers)
    diags.extend(merge_diags)
    settings = _env_overrides(settings, os.environ)
    return LoadedSettings(settings=settings, diagnostics=diags, files=files)
