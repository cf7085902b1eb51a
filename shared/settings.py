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
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

from pydantic import ValidationError

from jidocode.shared.errors import InvalidInput, JidoError
from jidocode.shared.json_where import key_path, key_positions
from jidocode.shared.settings_layer import (
    HOOK_NAMES,
    bus_diagnostics,
    clean_layer,
    hook_bus_problem,
    parse_settings_bytes,
    signal_bus_diagnostics,
)
from jidocode.shared.settings_model import (
    MAX_SETTINGS_BYTES,
    SIGNAL_BUS_NAME,
    Diagnostic,
    HookSettings,
    HooksSettings,
    LlmSettings,
    LoadedSettings,
    PermissionsSettings,
    SandboxSettings,
    Settings,
    ToolSettings,
)
from jidocode.shared.settings_restrict import UNTRUSTED_IGNORED, restrict_project_layer
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


#: Permission lists that add up across layers: a lower layer never removes a higher layer's rule.
MERGED_LISTS: Final = ("deny", "ask")

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


def _finish(merged: dict[str, Any], origin: dict[str, str], diags: list[Diagnostic]) -> Settings:
    """Validate the merged dict; a hook still incomplete after the merge is dropped."""
    hooks = merged.get("hooks")
    if isinstance(hooks, dict):
        for name in HOOK_NAMES:
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
        clean = clean_layer(raw, file, diags)
        if scope == "project":
            clean, ignored = restrict_project_layer(clean, merged, file=file, trusted=trusted, root=root)
            diags.extend(ignored)
        diags.extend(bus_diagnostics(clean, file))  # what the layer kept: an ignored one is said so above
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
