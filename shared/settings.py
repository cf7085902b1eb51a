"""``settings.json``: the model, the layers and their merge (seeds 000 and 001).

Layers, lowest first (a later layer wins, key by key)::

    <jido_home>/settings.json            global: jido_home, else $JIDO_CODE_HOME, else ~/.jido_code
    <root>/.jido_code/settings.json      project, seed 001 spelling
    <root>/<data_dir>/settings.json      project data dir (default .jido), seed 000 spelling

Objects merge recursively by key; scalars and lists are replaced, except
``permissions.deny`` and ``permissions.ask``, which add up: a lower layer
never removes a higher layer's rule. The environment (the user's layer) has
the last word for ``JIDO_LLM_MODEL`` and ``JIDO_LLM_API_BASE``.

Trust (``shared/trust.py``): the project layers count in full only when the
user trusts the root. Untrusted, they can only restrict
(:func:`restrict_project_layer`): whatever would widen the policy, raise a
limit, pick the model, its endpoint or its key, or define a hook is ignored
with a warning naming the file, the key and why. Trusted or not, a project
never turns the sandbox off or gives tools network access, and the key named
by ``llm.api_key_env`` is only sent to an ``llm.api_base`` set in the same
layer (user: the global file and the environment; project: its files).

Loading never raises on bad input: a file that cannot be read or decoded, or a
key whose value is invalid, becomes a :class:`Diagnostic` naming the file, its
line and column, the key and the problem (unknown top-level keys such as
``$schema`` are ignored; unknown keys inside a known section are a warning).
Such an error fails closed: it is listed in :attr:`LoadedSettings.broken`, and
whoever acts on the settings (the tool runner's policy, the sandbox's mode, a
conversation's model) calls :func:`require_usable`, which refuses with every
error's ``file:line:column`` until the file is fixed. A file is never used in
part, since what was dropped could be the ``deny`` rule that mattered
(docs/decisions/0304-settings-fail-closed.md). ``settings`` itself still holds
what the valid keys merge to, for ``doctor`` and the diagnostics.

``signal_bus`` and a hook's ``bus`` load as seed 001 writes them, but NATS is
the one bus (``jido_code_bus``) and runs no middleware: another bus name, any
``middleware`` entry (its Logger included) or an unknown key is a warning
saying it has no effect and why (:func:`signal_bus_diagnostics`,
:func:`hook_bus_problem`), for each layer that counts.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Final, Literal

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, field_validator

from jidocode.shared.errors import InvalidInput, JidoError
from jidocode.shared.json_where import byte_position, duplicate_key, key_path, key_positions, text_position
from jidocode.shared.subjects import type_tokens
from jidocode.shared.trust import trust_state

__all__ = [
    "MAX_SETTINGS_BYTES",
    "MERGED_LISTS",
    "SIGNAL_BUS_NAME",
    "UNTRUSTED_IGNORED",
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
    "hook_bus_problem",
    "load_settings",
    "locate",
    "merge_layers",
    "parse_settings_bytes",
    "require_usable",
    "restrict_project_layer",
    "settings_files",
    "signal_bus_diagnostics",
]

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


# --- signal_bus (seed 001) -------------------------------------------------------

_WATCH_HINT: Final = "to see every signal as it passes, run `jidocode watch` (--json for one JSON line each)"


def hook_bus_problem(bus: str) -> str | None:
    """Why a hook's ``bus`` has no effect, or ``None`` when it names the one bus (``:jido_code_bus``)."""
    if bus.removeprefix(":") == SIGNAL_BUS_NAME:
        return None
    return (
        f"no bus named {bus!r}: JidoCode has one signal bus (NATS, {SIGNAL_BUS_NAME!r}), "
        "so the hook is published there, on jido.hook.<signal_type>"
    )


def signal_bus_diagnostics(value: Mapping[str, Any], file: str) -> list[Diagnostic]:
    """What of ``signal_bus`` has no effect, one warning per key, saying why (pure).

    The bus is NATS: it has one name and runs no middleware. ``name`` naming
    the one bus and an empty ``middleware`` list are what the system does, so
    they are silent; anything else is reported, never silently dropped.
    """
    diags: list[Diagnostic] = []

    def warn(key: str, problem: str) -> None:
        diags.append(Diagnostic(file=file, key=f"signal_bus.{key}", problem=problem, severity="warning"))

    for key, sub in value.items():
        if key == "name":
            if not isinstance(sub, str):
                warn(key, "must be a string, ignored")
            elif sub.removeprefix(":") != SIGNAL_BUS_NAME:
                warn(
                    key,
                    f"JidoCode has one signal bus (NATS, subjects jido.>), called {SIGNAL_BUS_NAME!r}: "
                    f"no bus named {sub!r} is created and every signal goes on the one bus",
                )
        elif key == "middleware":
            if not isinstance(sub, list):
                warn(key, "must be a list, ignored")
                continue
            for index, item in enumerate(sub):
                module = item.get("module") if isinstance(item, Mapping) else None
                opts = item.get("opts") if isinstance(item, Mapping) else None
                level = opts.get("level") if isinstance(opts, Mapping) else None
                what = f"middleware {module!r}" if isinstance(module, str) else "this middleware"
                warn(
                    f"middleware[{index}]",
                    f"{what} is not supported, ignored: the bus is NATS, which runs no middleware"
                    + (f" (the level {level!r} is not applied)" if level is not None else "")
                    + f"; {_WATCH_HINT}",
                )
        else:
            warn(str(key), "unknown key, ignored (signal_bus has name and middleware)")
    return diags


def _bus_diagnostics(clean: Mapping[str, Any], file: str) -> list[Diagnostic]:
    """The :func:`signal_bus_diagnostics` and hook ``bus`` warnings of what a layer kept."""
    diags: list[Diagnostic] = []
    signal_bus = clean.get("signal_bus")
    if isinstance(signal_bus, Mapping):
        diags.extend(signal_bus_diagnostics(signal_bus, file))
    hooks = clean.get("hooks")
    for name, hook in hooks.items() if isinstance(hooks, Mapping) else ():
        bus = hook.get("bus") if isinstance(hook, Mapping) else None
        problem = hook_bus_problem(bus) if isinstance(bus, str) else None
        if problem is not None:
            diags.append(Diagnostic(file=file, key=f"hooks.{name}.bus", problem=problem, severity="warning"))
    return diags


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
        line, column = byte_position(raw, exc.start)
        problem = f"not valid UTF-8 at byte {exc.start}"
        return None, [*diags, Diagnostic(file=file, problem=problem, line=line, column=column)]
    if not text.strip():
        return {}, diags
    try:
        value = json.loads(text, object_pairs_hook=_no_duplicates)
    except _DuplicateKeyError as exc:
        return None, [*diags, _duplicate(text, file, str(exc))]
    except json.JSONDecodeError as exc:
        problem = f"invalid JSON: {_json_problem(text, exc)}"
        return None, [*diags, Diagnostic(file=file, problem=problem, line=exc.lineno, column=exc.colno)]
    except RecursionError:
        return None, [*diags, Diagnostic(file=file, problem="JSON nested too deeply")]
    if not isinstance(value, dict):
        line, column = text_position(text, len(text) - len(text.lstrip()))
        problem = "top level must be a JSON object"
        return None, [*diags, Diagnostic(file=file, problem=problem, line=line, column=column)]
    return value, diags


def _json_problem(text: str, exc: json.JSONDecodeError) -> str:
    """``json``'s message, naming the usual slip: a trailing comma before ``}`` or ``]``."""
    closing = text[exc.pos : exc.pos + 1]
    if closing in ("}", "]") and text[: exc.pos].rstrip().endswith(","):
        return f"trailing comma before {closing!r} ({exc.msg})"
    return exc.msg


def _duplicate(text: str, file: str, problem: str) -> Diagnostic:
    """The duplicate-key error, at the key's second occurrence."""
    found = duplicate_key(text)
    if found is None:
        return Diagnostic(file=file, problem=problem)
    path, (line, column) = found
    return Diagnostic(file=file, key=".".join(path), problem=problem, line=line, column=column)


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


def _union(low: list[Any], high: list[Any]) -> list[Any]:
    out = list(low)
    out.extend(item for item in high if item not in out)
    return out


def _merge_layer(merged: dict[str, Any], clean: Mapping[str, Any]) -> dict[str, Any]:
    """:func:`deep_merge`, except that ``deny`` and ``ask`` lists add up across layers."""
    old, new = merged.get("permissions"), clean.get("permissions")
    if isinstance(old, Mapping) and isinstance(new, Mapping):
        joined = dict(new)
        for key in MERGED_LISTS:
            if isinstance(old.get(key), list) and isinstance(new.get(key), list):
                joined[key] = _union(old[key], new[key])
        clean = {**clean, "permissions": joined}
    return deep_merge(merged, clean)


def merge_layers(
    layers: list[tuple[str, Mapping[str, Any]]],
    *,
    project: list[tuple[str, Mapping[str, Any]]] | None = None,
    trusted: bool = True,
    env: Mapping[str, str] | None = None,
    root: str | None = None,
) -> tuple[Settings, list[Diagnostic]]:
    """Pure core: clean each ``(file, raw dict)`` layer, merge lowest first, validate.

    ``layers`` are the user's (the global home), ``project`` the project's,
    merged after them under the trust rules (:func:`restrict_project_layer`);
    ``env`` (the user's layer too) has the last word on ``JIDO_LLM_MODEL`` and
    ``JIDO_LLM_API_BASE``. Then the key rule: ``llm.api_key_env`` is dropped
    when ``llm.api_base`` comes from another layer.
    """
    diags: list[Diagnostic] = []
    merged: dict[str, Any] = {}
    origin: dict[str, str] = {}
    key_origin: dict[str, tuple[str, str]] = {}
    scoped = [(file, raw, "user") for file, raw in layers]
    scoped += [(file, raw, "project") for file, raw in project or []]
    for file, raw, scope in scoped:
        clean = _clean_layer(raw, file, diags)
        if scope == "project":
            clean, ignored = restrict_project_layer(clean, merged, file=file, trusted=trusted, root=root)
            diags.extend(ignored)
        diags.extend(_bus_diagnostics(clean, file))  # what the layer kept: an ignored one is said so above
        _origins(clean, file, origin)
        llm = clean.get("llm")
        if isinstance(llm, Mapping):
            for key in ("api_base", "api_key_env"):
                if key in llm:
                    key_origin[key] = (scope, file)
        merged = _merge_layer(merged, clean)
    settings = _finish(merged, origin, diags)
    settings = _env_overrides(settings, env or {}, key_origin)
    return _pair_key_with_base(settings, key_origin, diags), diags


def _env_overrides(
    settings: Settings, env: Mapping[str, str], key_origin: dict[str, tuple[str, str]]
) -> Settings:
    updates: dict[str, Any] = {}
    if env.get("JIDO_LLM_MODEL"):
        updates["model"] = env["JIDO_LLM_MODEL"]
    if env.get("JIDO_LLM_API_BASE"):
        updates["api_base"] = env["JIDO_LLM_API_BASE"]
        key_origin["api_base"] = ("user", "JIDO_LLM_API_BASE")
    if not updates:
        return settings
    return settings.model_copy(update={"llm": settings.llm.model_copy(update=updates)})


def _pair_key_with_base(
    settings: Settings, key_origin: dict[str, tuple[str, str]], diags: list[Diagnostic]
) -> Settings:
    """The key is only ever sent to an ``api_base`` set by the same layer (user or project)."""
    llm = settings.llm
    if not (llm.api_key_env and llm.api_base):
        return settings
    key_scope, key_file = key_origin.get("api_key_env", ("user", "<defaults>"))
    base_scope, base_file = key_origin.get("api_base", ("user", "<defaults>"))
    if key_scope == base_scope:
        return settings
    diags.append(
        Diagnostic(
            file=key_file,
            key="llm.api_key_env",
            problem=(
                f"not used: llm.api_base comes from {base_file}, another layer; the key is only "
                "sent to an api_base set in the same layer (set both there)"
            ),
            severity="warning",
        )
    )
    return settings.model_copy(update={"llm": llm.model_copy(update={"api_key_env": None})})


# --- trust ----------------------------------------------------------------------

#: How every diagnostic about something an untrusted project asked for begins.
UNTRUSTED_IGNORED: Final = "ignored: the project is not trusted"
#: Permission lists that add up across layers: a lower layer never removes a higher layer's rule.
MERGED_LISTS: Final = ("deny", "ask")
#: Limits an untrusted project may lower, never raise (``None`` below: no limit yet).
_LOWER_ONLY: Final = frozenset(
    {("tools", name) for name in ToolSettings.model_fields}
    | {("llm", name) for name in ("max_turns", "timeout_s", "max_retries", "budget_tokens", "budget_usd")}
)
#: Keys with no bearing on what runs, where, or with which key.
_NEUTRAL: Final = frozenset({("llm", "temperature")})
_USER_ONLY_WHY: Final = {
    "model": "the model is chosen by the user",
    "compact_model": "the model is chosen by the user",
    "api_base": "where the model is called (and the key is sent) is chosen by the user",
    "api_key_env": "which secret is sent as the API key is chosen by the user",
    "client_key_envs": "which secrets a client may send as an API key is chosen by the user",
}
#: Sandbox modes from weakest to strictest (``auto`` falls back to Landlock; ``bubblewrap`` never does).
_SANDBOX_STRENGTH: Final = {"off": 0, "landlock": 1, "auto": 2, "bubblewrap": 3}
_OFF_VALUES: Final = (None, False, "", "off", "none", "deny", "denied", "disabled")


def _lower(merged: Mapping[str, Any], section: str, key: str) -> Any:
    """The value of ``section.key`` after the lower layers (the model's default when unset)."""
    value = merged.get(section)
    if isinstance(value, Mapping) and key in value:
        return value[key]
    model = _SECTIONS.get(section)
    if model is None or key not in model.model_fields:
        return None
    return model.model_fields[key].get_default(call_default_factory=True)


def _rule_parts(rule: str) -> tuple[str, str | None]:
    name, paren, rest = rule.partition("(")
    if not paren or not rest.endswith(")"):
        return rule.strip(), None
    return name.strip(), rest[:-1].strip()


def _within(ask: str, allow: str) -> bool:
    """Every call ``ask`` matches is also matched by ``allow`` (conservative: False when unsure)."""
    if ask == allow:
        return True
    ask_name, ask_pat = _rule_parts(ask)
    allow_name, allow_pat = _rule_parts(allow)
    if ask_name != allow_name:
        return False
    if allow_pat is None:
        return True
    if ask_pat is None:
        return False
    if allow_pat.endswith(":*"):
        prefix = allow_pat[:-2].split()
        return ask_pat.removesuffix(":*").split()[: len(prefix)] == prefix
    if allow_pat.endswith("/**") and ".." not in ask_pat.split("/"):
        return ask_pat.startswith(allow_pat[:-2])
    return False


def _network_enabled(value: Any) -> bool:
    if isinstance(value, Mapping):
        return bool(value.get("enabled", bool(value)))
    if isinstance(value, list | tuple):
        return bool(value)
    return value not in _OFF_VALUES


def restrict_project_layer(
    clean: Mapping[str, Any],
    lower: Mapping[str, Any],
    *,
    file: str,
    trusted: bool,
    root: str | None = None,
) -> tuple[dict[str, Any], list[Diagnostic]]:
    """Keep what a project layer may set; a diagnostic for each key it may not (pure).

    ``clean`` is the project layer after per-key validation, ``lower`` what the
    layers under it merged to. Trusted or not, the project's ``sandbox`` may
    only get stricter: ``mode: "off"`` and network access are the user's call.
    Untrusted, the layer can only restrict: ``deny`` rules, ``ask`` rules that
    narrow an allow, a ``deny`` default, lower limits, ``allow`` lists and
    ``additional_directories`` that only drop entries, hooks switched off; the
    rest is ignored — ``llm.model``, ``llm.api_base``, ``llm.api_key_env``,
    allows, directories, raised limits, hook definitions, and any section this
    version cannot judge.
    """
    diags: list[Diagnostic] = []
    where = root or "<root>"

    def ignore(key: str, why: str) -> None:
        problem = (
            f"ignored: {why}"
            if trusted
            else f"{UNTRUSTED_IGNORED}, so its settings can only restrict ({why}); "
            f"run `jidocode projects trust {where}`"
        )
        diags.append(Diagnostic(file=file, key=key, problem=problem, severity="warning"))

    out: dict[str, Any] = {}
    for top, value in clean.items():
        if top == "sandbox" and isinstance(value, Mapping):
            out[top] = _restrict_sandbox(value, lower, trusted=trusted, ignore=ignore)
        elif trusted or top == "version":
            out[top] = value
        elif top == "permissions" and isinstance(value, Mapping):
            out[top] = _restrict_permissions(value, lower, ignore)
        elif top in ("tools", "llm") and isinstance(value, Mapping):
            out[top] = _restrict_limits(top, value, lower, ignore)
        elif top == "hooks" and isinstance(value, Mapping):
            out[top] = _restrict_hooks(value, ignore)
        else:
            ignore(top, "this section cannot be checked to only restrict")
    return out, diags


def _restrict_sandbox(
    value: Mapping[str, Any], lower: Mapping[str, Any], *, trusted: bool, ignore: Any
) -> dict[str, Any]:
    kept: dict[str, Any] = {}
    for key, sub in value.items():
        path = f"sandbox.{key}"
        if key == "mode":
            below = _lower(lower, "sandbox", "mode")
            if sub == "off":
                ignore(path, "only the user's global settings can turn the sandbox off")
            elif _SANDBOX_STRENGTH.get(sub, -1) < _SANDBOX_STRENGTH.get(below, 0):
                ignore(
                    path, f"{sub!r} is weaker than {below!r}; a project can only make the sandbox stricter"
                )
            else:
                kept[key] = sub
        elif key == "network" and _network_enabled(sub):
            ignore(path, "only the user's global settings can give tools network access")
        elif trusted or key == "network":
            kept[key] = sub
        else:
            ignore(path, "this key cannot be checked to only restrict")
    return kept


def _restrict_permissions(value: Mapping[str, Any], lower: Mapping[str, Any], ignore: Any) -> dict[str, Any]:
    kept: dict[str, Any] = {}
    for key, sub in value.items():
        path = f"permissions.{key}"
        if key == "deny":
            kept[key] = sub
        elif key == "default":
            if sub == "deny" or _lower(lower, "permissions", "default") == sub:
                kept[key] = sub
            else:
                ignore(path, f"{sub!r} is looser than {_lower(lower, 'permissions', 'default')!r}")
        elif key in ("allow", "additional_directories"):
            below = _lower(lower, "permissions", key) or []
            added = [item for item in sub if item not in below]
            if added:
                ignore(path, f"adds {', '.join(map(str, added))}")
            else:
                kept[key] = sub
        elif key == "ask":
            if _lower(lower, "permissions", "default") == "ask":
                kept[key] = sub
                continue
            allows = _lower(lower, "permissions", "allow") or []
            narrowing = [rule for rule in sub if any(_within(rule, allow) for allow in allows)]
            dropped = [rule for rule in sub if rule not in narrowing]
            if dropped:
                ignore(
                    path,
                    f"{', '.join(dropped)} would turn calls the default denies into questions",
                )
            kept[key] = narrowing
        else:
            ignore(path, "this key cannot be checked to only restrict")
    return kept


def _restrict_limits(
    section: str, value: Mapping[str, Any], lower: Mapping[str, Any], ignore: Any
) -> dict[str, Any]:
    kept: dict[str, Any] = {}
    for key, sub in value.items():
        path = f"{section}.{key}"
        if (section, key) in _NEUTRAL:
            kept[key] = sub
        elif (section, key) in _LOWER_ONLY:
            below = _lower(lower, section, key)
            if below is None or (sub is not None and sub <= below):
                kept[key] = sub
            else:
                ignore(path, f"raises the limit from {below} to {sub}")
        elif section == "llm" and key in _USER_ONLY_WHY:
            ignore(path, _USER_ONLY_WHY[key])
        else:
            ignore(path, "this key cannot be checked to only restrict")
    return kept


def _restrict_hooks(value: Mapping[str, Any], ignore: Any) -> dict[str, Any]:
    kept: dict[str, Any] = {}
    for name, hook in value.items():
        if hook is None or hook == {"enabled": False}:
            kept[name] = hook  # switching a hook off only restricts
        else:
            ignore(f"hooks.{name}", "hook definitions run on the user's behalf")
    return kept


def load_settings(
    root: Path | None,
    *,
    jido_home: Path | None = None,
    data_dir: str = ".jido",
    trusted: bool | None = None,
) -> LoadedSettings:
    """Read and merge every layer of ``root`` (``None``: the global layer only).

    ``trusted`` ``None`` reads the user's trust store (``shared/trust.py``) in
    the global home. Untrusted, the project layer can only restrict, and a
    ``.mcp.json`` in the root is reported as not started. Never raises for bad
    content: problems are in ``diagnostics``; ``files`` lists the files that
    exist and were read.
    """
    diags: list[Diagnostic] = []
    layers: list[tuple[str, Mapping[str, Any]]] = []
    project: list[tuple[str, Mapping[str, Any]]] = []
    files: list[str] = []
    texts: dict[str, bytes] = {}
    home = global_home(jido_home)
    paths = settings_files(root, jido_home=home, data_dir=data_dir)
    if root is not None and trusted is None:
        state = trust_state(root, home=home)
        trusted = state.trusted
        if state.problem:
            diags.append(Diagnostic(file=state.store, problem=f"{state.problem}; no project is trusted"))
    for index, path in enumerate(paths):
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
        texts[file] = raw
        value, file_diags = parse_settings_bytes(raw, file)
        diags.extend(file_diags)
        if value is not None:
            (layers if index == 0 else project).append((file, value))
    real_root = os.path.realpath(root) if root is not None else None
    settings, merge_diags = merge_layers(
        layers, project=project, trusted=bool(trusted), env=os.environ, root=real_root
    )
    diags.extend(merge_diags)
    if root is not None and not trusted:
        mcp = root / ".mcp.json"
        with contextlib.suppress(OSError):
            if mcp.is_file():
                diags.append(
                    Diagnostic(
                        file=str(mcp),
                        key="mcpServers",
                        problem=f"{UNTRUSTED_IGNORED}, so its MCP servers are not started; "
                        f"run `jidocode projects trust {real_root}`",
                        severity="warning",
                    )
                )
    diags = locate(diags, texts)
    own = {str(path) for path in paths}
    return LoadedSettings(
        settings=settings,
        diagnostics=diags,
        files=files,
        trusted=None if root is None else bool(trusted),
        broken=[d for d in diags if d.severity == "error" and d.file in own],
    )


def locate(diags: list[Diagnostic], texts: Mapping[str, bytes]) -> list[Diagnostic]:
    """Give each diagnostic naming a key of one of ``texts`` (file -> its bytes) that key's line and column."""
    positions: dict[str, dict[tuple[str, ...], tuple[int, int]]] = {}
    out: list[Diagnostic] = []
    for diag in diags:
        raw = texts.get(diag.file)
        if diag.line is not None or diag.key is None or raw is None:
            out.append(diag)
            continue
        if diag.file not in positions:
            text = raw.decode("utf-8", errors="replace").removeprefix("\ufeff")
            positions[diag.file] = key_positions(text)
        found = _nearest(positions[diag.file], key_path(diag.key))
        out.append(diag if found is None else diag.model_copy(update={"line": found[0], "column": found[1]}))
    return out


def _nearest(
    positions: Mapping[tuple[str, ...], tuple[int, int]], path: tuple[str, ...]
) -> tuple[int, int] | None:
    """The position of ``path``, else of its nearest enclosing key that is in the file."""
    for end in range(len(path), 0, -1):
        if path[:end] in positions:
            return positions[path[:end]]
    return None


def require_usable(
    loaded: LoadedSettings, *, refused: str, error: type[JidoError] = InvalidInput
) -> Settings:
    """``loaded.settings``, or ``error`` (:class:`InvalidInput`) naming every error of the settings files.

    A settings file with an error is never used in part (its ``deny`` rules would
    vanish with it): ``refused`` says what is refused until it is fixed, e.g.
    ``"every tool call of this project"``. Nothing is cached here, so the first
    call after the fix works.
    """
    if not loaded.broken:
        return loaded.settings
    listed = "; ".join(str(d) for d in loaded.broken)
    raise error(
        f"{refused} is refused until its settings are fixed: {listed} "
        "(a settings file with an error is not used in part, so none of its rules would hold)",
        details={
            "reason": "settings_invalid",
            "files": sorted({d.file for d in loaded.broken}),
            "problems": [d.model_dump() for d in loaded.broken],
        },
    )
