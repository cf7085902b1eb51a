"""One settings file as a layer: decode its bytes, keep its valid keys, warn about its bus.

Pure functions used by :mod:`jidocode.shared.settings` (which re-exports the public ones):
a file that cannot be decoded, or a key whose value is invalid, becomes a
:class:`~jidocode.shared.settings_model.Diagnostic`, never an exception.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Annotated, Any, Final

from pydantic import BaseModel, TypeAdapter, ValidationError

from jidocode.shared.json_where import byte_position, duplicate_key, text_position
from jidocode.shared.settings_model import (
    MAX_SETTINGS_BYTES,
    SIGNAL_BUS_NAME,
    ConversationSettings,
    Diagnostic,
    HookSettings,
    LlmSettings,
    PermissionsSettings,
    SandboxSettings,
    Settings,
    ToolSettings,
)

# --- per-key validation ------------------------------------------------------

# Sections whose sub-keys are checked one by one, so one bad key keeps the rest.
SECTIONS: Final[dict[str, type[BaseModel]]] = {
    "permissions": PermissionsSettings,
    "llm": LlmSettings,
    "tools": ToolSettings,
    "sandbox": SandboxSettings,
    "conversations": ConversationSettings,
}
HOOK_NAMES: Final = ("pre", "post")
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


def clean_layer(raw: Mapping[str, Any], file: str, diags: list[Diagnostic]) -> dict[str, Any]:
    """Keep only the valid keys of one layer, reporting each invalid one."""
    clean: dict[str, Any] = {}
    for top in ("version", "signal_bus", "data_dir"):
        if top in raw:
            problem = _check(Settings, top, raw[top])
            if problem is None:
                clean[top] = raw[top]
            else:
                diags.append(Diagnostic(file=file, key=top, problem=problem))
    for section, model in SECTIONS.items():
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
        if name not in HOOK_NAMES:
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


def bus_diagnostics(clean: Mapping[str, Any], file: str) -> list[Diagnostic]:
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
        at = _error_at(text, exc.pos)
        problem = f"invalid JSON: {_json_problem(text, exc, at)}"
        line, column = text_position(text, at)
        return None, [*diags, Diagnostic(file=file, problem=problem, line=line, column=column)]
    except RecursionError:
        return None, [*diags, Diagnostic(file=file, problem="JSON nested too deeply")]
    if not isinstance(value, dict):
        line, column = text_position(text, len(text) - len(text.lstrip()))
        problem = "top level must be a JSON object"
        return None, [*diags, Diagnostic(file=file, problem=problem, line=line, column=column)]
    return value, diags


def _error_at(text: str, pos: int) -> int:
    """Where a JSON error is reported: a trailing comma's at the bracket after it (Python 3.13's
    ``json`` points at the comma itself, earlier ones at the bracket: the same on every version)."""
    if text[pos : pos + 1] == ",":
        after = len(text) - len(text[pos + 1 :].lstrip())
        if text[after : after + 1] in ("}", "]"):
            return after
    return pos


def _json_problem(text: str, exc: json.JSONDecodeError, at: int) -> str:
    """``json``'s message, or the usual slip named: a trailing comma before ``}`` or ``]`` (whose
    message from ``json`` differs between Python versions)."""
    closing = text[at : at + 1]
    if closing in ("}", "]") and text[:at].rstrip().endswith(","):
        return f"trailing comma before {closing!r}"
    return exc.msg


def _duplicate(text: str, file: str, problem: str) -> Diagnostic:
    """The duplicate-key error, at the key's second occurrence."""
    found = duplicate_key(text)
    if found is None:
        return Diagnostic(file=file, problem=problem)
    path, (line, column) = found
    return Diagnostic(file=file, key=".".join(path), problem=problem, line=line, column=column)
