"""Which sandbox a call gets: the user's setting against what the machine can do.

:func:`choose` is pure. :func:`effective_settings` reads the settings layers:
``sandbox.mode: off`` only from the user's **global** layer (a project can
never turn the sandbox off, nor pick a weaker one; it may ask for a stronger
one: ``landlock`` < ``auto`` < ``bubblewrap``); ``sandbox.network`` must be
allowed by the global layer, and a project layer can only forbid it.

``JIDO_SANDBOX_MODE`` (:data:`MODE_ENV`: ``auto``, ``bubblewrap`` or ``landlock``) in the
environment of the process that starts the commands replaces the global layer's mode (a project
layer that asks for a stronger mode than the global settings.json keeps it): CI runs
the sandbox-dependent tests again with it set to ``landlock``, so the fallback cannot rot
(decision 0316). It can pick a sandbox, never turn it off; any other value refuses every
sandboxed process, saying so.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Final, Literal

from pydantic import BaseModel, ConfigDict

from jidocode.shared.errors import PermissionDenied
from jidocode.shared.settings import SandboxSettings, load_settings, require_usable, settings_files

from ._detect import Capabilities

__all__ = ["INSTALL_HINT", "MODE_ENV", "Choice", "choose", "effective_settings", "forced_mode"]

INSTALL_HINT: Final = (
    "install bubblewrap (Debian/Ubuntu: apt-get install bubblewrap; Fedora: dnf install bubblewrap) "
    "and allow unprivileged user namespaces; in a container see docs/deploy.md"
)
#: What a settings file with an error refuses (the start of the error's message).
_REFUSED: Final = "every sandboxed process of this project"
_LANDLOCK_HINT: Final = "use a Linux kernel >= 5.13 with landlock in its LSM list (lsm=...,landlock)"

#: How strong each ``sandbox.mode`` is: a project layer may only move up.
_STRENGTH: Final = {"off": 0, "landlock": 1, "auto": 2, "bubblewrap": 3}
#: The environment variable that replaces the global layer's ``sandbox.mode``.
MODE_ENV: Final = "JIDO_SANDBOX_MODE"
#: What :data:`MODE_ENV` may say (never ``off``: that is said only in the global settings.json).
_FORCEABLE: Final = ("auto", "bubblewrap", "landlock")

Mode = Literal["bubblewrap", "landlock", "off", "unavailable"]
SandboxMode = Literal["auto", "bubblewrap", "landlock"]


class Choice(BaseModel):
    """The sandbox of a call: which one, why, and how to get a stronger one."""

    model_config = ConfigDict(frozen=True)

    mode: Mode
    reason: str
    #: What would give a stronger sandbox here (empty when bubblewrap already runs).
    hint: str = ""
    network: bool = False

    @property
    def sandboxed(self) -> bool | None:
        """``True`` in a sandbox, ``False`` when turned off, ``None`` when the call is refused."""
        if self.mode == "unavailable":
            return None
        return self.mode != "off"


def choose(settings: SandboxSettings, caps: Capabilities) -> Choice:
    """The sandbox for ``settings`` (global mode, effective network) on a machine with ``caps``.

    Pure but for the wording: a Landlock forced by :data:`MODE_ENV` is said to be (the reason
    and the hint name the variable, not a settings file that does not say it).
    """
    net = settings.network
    if settings.mode == "off":
        return Choice(
            mode="off",
            reason="sandbox.mode is off in the user's global settings: commands run without an OS sandbox",
            hint="remove sandbox.mode: off from the global settings.json",
            network=True,
        )
    if settings.mode in ("auto", "bubblewrap") and caps.bwrap:
        return Choice(mode="bubblewrap", reason=f"bubblewrap ({caps.bwrap})", network=net)
    if settings.mode in ("auto", "landlock") and caps.landlock_abi:
        if settings.mode == "landlock" and os.environ.get(MODE_ENV, "").strip() == "landlock":
            why = f"{MODE_ENV} is landlock"
            hint = f"bubblewrap runs here: unset {MODE_ENV}" if caps.bwrap else INSTALL_HINT
        elif settings.mode == "landlock":
            why = "sandbox.mode is landlock"
            hint = 'bubblewrap runs here: set "sandbox": {"mode": "auto"}' if caps.bwrap else INSTALL_HINT
        else:
            why, hint = caps.bwrap_problem, INSTALL_HINT
        if caps.landlock_abi < 4 and not net:
            why += "; network NOT confined: Landlock ABI < 4 (Linux < 6.7)"
        return Choice(
            mode="landlock",
            reason=f"Landlock ABI {caps.landlock_abi}, not bubblewrap ({why})",
            hint=hint,
            network=net,
        )
    problems = []
    if settings.mode in ("auto", "bubblewrap"):
        problems.append(caps.bwrap_problem or "bubblewrap cannot run")
    if settings.mode in ("auto", "landlock"):
        problems.append(f"Landlock: {caps.landlock_problem or 'not available'}")
    return Choice(
        mode="unavailable",
        reason=f"no OS sandbox can run here (sandbox.mode {settings.mode}): " + "; ".join(problems),
        hint=f"{INSTALL_HINT}; or {_LANDLOCK_HINT}; or, at your own risk, set "
        '"sandbox": {"mode": "off"} in your global settings.json',
        network=net,
    )


def forced_mode(environ: Mapping[str, str] | None = None) -> SandboxMode | None:
    """The mode :data:`MODE_ENV` forces in ``environ`` (default: this process's), ``None`` when unset.

    Raises :class:`PermissionDenied` for any other value, ``off`` included: a typo must not
    silently run another sandbox than the one asked for, and the variable (which a project's
    ``.envrc`` could set) never turns the sandbox off.
    """
    raw = (os.environ if environ is None else environ).get(MODE_ENV, "").strip()
    if not raw:
        return None
    for mode in _FORCEABLE:
        if raw == mode:
            return mode
    raise PermissionDenied(
        f"{_REFUSED} is refused: {MODE_ENV}={raw!r} is not a sandbox mode this variable may set "
        f"(one of {', '.join(_FORCEABLE)}; turning the sandbox off is said only in the global "
        "settings.json)",
        details={"sandbox": "bad_mode_env", "env": MODE_ENV, "value": raw},
    )


_cache: dict[tuple[str, str, str, str], tuple[tuple[object, ...], SandboxSettings]] = {}
_cache_lock = threading.Lock()


def _stamp(files: list[Path]) -> tuple[object, ...]:
    out: list[object] = []
    for f in files:
        try:
            st = f.stat()
            out.append((str(f), st.st_mtime_ns, st.st_size, st.st_ino))
        except OSError:
            out.append((str(f), None))
    return tuple(out)


def effective_settings(root: str, *, jido_home: str | None, data_dir: str = ".jido") -> SandboxSettings:
    """The ``sandbox`` settings of ``root``: mode from the global layer (or :data:`MODE_ENV`),
    network global AND project.

    Cached until one of the settings files (or the variable) changes (a stat per file per call).
    """
    forced = forced_mode()
    home = Path(jido_home) if jido_home else None
    files = settings_files(Path(root), jido_home=home, data_dir=data_dir)
    key = (root, str(home), data_dir, forced or "")
    stamp = _stamp(files)
    with _cache_lock:
        hit = _cache.get(key)
    if hit is not None and hit[0] == stamp:
        return hit[1]
    # a settings file with an error refuses, never falls back to a weaker mode (decision 0304)
    glob_loaded = load_settings(None, jido_home=home)
    glob = require_usable(glob_loaded, refused=_REFUSED, error=PermissionDenied).sandbox
    loaded = load_settings(Path(root), jido_home=home, data_dir=data_dir)
    merged = require_usable(loaded, refused=_REFUSED, error=PermissionDenied).sandbox
    # the project layer may ask for a stricter sandbox, never a weaker one, and never none
    stricter = merged.mode != "off" and _STRENGTH[merged.mode] >= _STRENGTH[glob.mode]
    mode = merged.mode if stricter else glob.mode
    if forced is not None and _STRENGTH[merged.mode] <= _STRENGTH[glob.mode]:
        mode = forced  # the variable replaces the global mode; a project that asked for more keeps it
    result = SandboxSettings(mode=mode, network=glob.network and merged.network)
    with _cache_lock:
        _cache[key] = (stamp, result)
    return result
