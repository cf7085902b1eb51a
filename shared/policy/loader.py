"""The policy of a project from its settings.json layers (global, then project).

The project layer counts in full only when the user trusts the root
(``shared/trust.py``); untrusted, :func:`~jidocode.shared.settings.load_settings`
keeps only what restricts. The cache's stamp covers the trust store, so
``jidocode projects trust``/``untrust`` takes effect on the next call.

A permission rule that does not parse, or a ``permissions`` key that the
settings loader had to drop, is a startup error (:class:`InvalidInput` naming
the file and the rule), never a rule that silently matches nothing.
"""

from __future__ import annotations

from pathlib import Path

from jidocode.shared.errors import InvalidInput
from jidocode.shared.settings import LoadedSettings, ToolSettings, global_home, load_settings, settings_files
from jidocode.shared.trust import trust_store_path

from .decision import Policy
from .rules import InvalidRule

__all__ = ["PolicyCache", "load_policy", "policy_from_settings"]


def policy_from_settings(
    root: str,
    loaded: LoadedSettings,
    *,
    data_dir: str = ".jido",
    jido_home: str | None = None,
    home: str | None = None,
) -> Policy:
    """Build the :class:`Policy` of ``root``; raise :class:`InvalidInput` on bad permissions."""
    bad = [
        d
        for d in loaded.diagnostics
        if d.severity == "error" and d.key is not None and d.key.split(".")[0] == "permissions"
    ]
    if bad:
        listed = "; ".join(f"{d.file}: {d.key}: {d.problem}" for d in bad)
        raise InvalidInput(
            f"invalid permissions in settings.json: {listed}",
            details={"problems": [d.model_dump() for d in bad]},
        )
    perms = loaded.settings.permissions
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
        )
    except InvalidRule as exc:
        raise InvalidInput(
            f"invalid permissions in settings.json ({', '.join(loaded.files) or 'defaults'}): {exc.problem}",
            details={"files": loaded.files},
        ) from None


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
        """The policy and tool limits of a project (raises :class:`InvalidInput` on bad permissions)."""
        stamp = self._stamp(root, data_dir)
        hit = self._cache.get(project_id)
        if hit is not None and hit[0] == stamp:
            return hit[1], hit[2]
        loaded = load_settings(Path(root), jido_home=self.jido_home, data_dir=data_dir)
        policy = policy_from_settings(root, loaded, data_dir=data_dir, jido_home=str(self.jido_home))
        self._cache[project_id] = (stamp, policy, loaded.settings.tools)
        return policy, loaded.settings.tools
