"""The policy of a project from its settings.json layers (global, then project).

The project layer counts in full only when the user trusts the root
(``shared/trust.py``); untrusted, :func:`~jidocode.shared.settings.load_settings`
keeps only what restricts. The cache's stamp covers the trust store, so
``jidocode projects trust``/``untrust`` takes effect on the next call.

Settings fail closed: while a settings file has an error (it does not parse,
or a key's value is invalid, ``"deny": "Bash"`` as much as a trailing comma),
no policy is built and every call of the project is refused with
:class:`InvalidInput` naming ``file:line:column`` (:func:`require_usable`);
the policy is never built from what was left. Nothing broken is cached, so the
first call after the fix works. A permission rule that does not parse is the
same kind of error, never a rule that silently matches nothing.
"""

from __future__ import annotations

from pathlib import Path

from jidocode.shared.errors import InvalidInput
from jidocode.shared.settings import (
    Diagnostic,
    LoadedSettings,
    ToolSettings,
    global_home,
    load_settings,
    locate,
    parse_settings_bytes,
    require_usable,
    settings_files,
)
from jidocode.shared.trust import trust_store_path

from .decision import Policy
from .rules import InvalidRule, parse_rule
from .starter import starter_permissions

__all__ = ["REFUSED", "PolicyCache", "load_policy", "policy_from_settings"]

#: What a settings error refuses (the start of its message).
REFUSED = "every tool call of this project"


def policy_from_settings(
    root: str,
    loaded: LoadedSettings,
    *,
    data_dir: str = ".jido",
    jido_home: str | None = None,
    home: str | None = None,
) -> Policy:
    """Build the :class:`Policy` of ``root``; :class:`InvalidInput` while a settings file has an error."""
    perms = require_usable(loaded, refused=REFUSED).permissions
    sandbox = loaded.settings.sandbox
    trusted = loaded.trusted is not False
    starter = starter_permissions(perms, trusted=trusted)
    perms = starter or perms
    try:
        return Policy.build(
            root,
            allow=perms.allow,
            deny=perms.deny,
            ask=perms.ask,
            default=perms.default,
            additional_directories=perms.additional_directories,
            data_dir=data_dir,
            jido_home=jido_home,
            home=home,
            trusted=trusted,
            starter=starter is not None,
            allowed_domains=sandbox.allowed_domains,
            denied_domains=sandbox.denied_domains,
        )
    except InvalidRule as exc:
        diags = _rule_diagnostics(loaded.files) or [
            Diagnostic(file=", ".join(loaded.files) or "<defaults>", key="permissions", problem=exc.problem)
        ]
        raise InvalidInput(
            f"{REFUSED} is refused until its settings are fixed: {'; '.join(map(str, diags))}",
            details={
                "reason": "settings_invalid",
                "files": loaded.files,
                "problems": [d.model_dump() for d in diags],
            },
        ) from None


def _rule_diagnostics(files: list[str]) -> list[Diagnostic]:
    """Each rule of ``files`` that does not parse, at its place in its file."""
    out: list[Diagnostic] = []
    for file in files:
        try:
            raw = Path(file).read_bytes()
        except OSError:
            continue
        value, _ = parse_settings_bytes(raw, file)
        perms = value.get("permissions") if value else None
        found: list[Diagnostic] = []
        for key in ("allow", "deny", "ask"):
            rules = perms.get(key) if isinstance(perms, dict) else None
            for index, rule in enumerate(rules if isinstance(rules, list) else []):
                try:
                    parse_rule(rule)
                except InvalidRule as exc:
                    found.append(Diagnostic(file=file, key=f"permissions.{key}[{index}]", problem=str(exc)))
        out.extend(locate(found, {file: raw}))
    return out


def load_policy(
    root: str, *, data_dir: str = ".jido", jido_home: Path | None = None
) -> tuple[Policy, ToolSettings]:
    """Read the settings layers of ``root`` and return its policy and tool limits."""
    home = global_home(jido_home)
    loaded = load_settings(Path(root), jido_home=home, data_dir=data_dir)
    policy = policy_from_settings(root, loaded, data_dir=data_dir, jido_home=str(home))
    return policy, loaded.settings.tools


class PolicyCache:
    """Policies of running projects, rebuilt when one of their settings files changes."""

    def __init__(self, jido_home: Path | None = None) -> None:
        self.jido_home = global_home(jido_home)
        self._cache: dict[str, tuple[tuple[object, ...], Policy, ToolSettings]] = {}

    def _stamp(self, root: str, data_dir: str) -> tuple[object, ...]:
        out: list[object] = [root, data_dir]
        watched = [*settings_files(Path(root), jido_home=self.jido_home, data_dir=data_dir)]
        watched.append(trust_store_path(self.jido_home))
        for f in watched:
            try:
                st = f.stat()
                out.append((str(f), st.st_mtime_ns, st.st_size, st.st_ino))
            except OSError:
                out.append((str(f), None))
        return tuple(out)

    def get(self, project_id: str, root: str, data_dir: str) -> tuple[Policy, ToolSettings]:
        """The policy and tool limits of a project (:class:`InvalidInput` while its settings have an
        error; an error is not cached, so each call reads the files again until they are fixed)."""
        stamp = self._stamp(root, data_dir)
        hit = self._cache.get(project_id)
        if hit is not None and hit[0] == stamp:
            return hit[1], hit[2]
        loaded = load_settings(Path(root), jido_home=self.jido_home, data_dir=data_dir)
        policy = policy_from_settings(root, loaded, data_dir=data_dir, jido_home=str(self.jido_home))
        self._cache[project_id] = (stamp, policy, loaded.settings.tools)
        return policy, loaded.settings.tools
