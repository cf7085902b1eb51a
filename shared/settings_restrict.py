"""What a project layer may set: :func:`restrict_project_layer` and its rules (pure).

Split from :mod:`jidocode.shared.settings` (which re-exports the public names). Trusted or
not, a project's ``sandbox`` may only get stricter; untrusted, its layer can only restrict.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from jidocode.shared.settings_layer import SECTIONS
from jidocode.shared.settings_model import Diagnostic, ToolSettings

# --- trust ----------------------------------------------------------------------

#: How every diagnostic about something an untrusted project asked for begins.
UNTRUSTED_IGNORED: Final = "ignored: the project is not trusted"
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
    model = SECTIONS.get(section)
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
