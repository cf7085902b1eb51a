"""Network through the egress proxy: a sandboxed command reaches the proxy, and nothing else.

:class:`Egress` names the proxy a launch may reach (its unix socket and its loopback TCP port);
:func:`jidocode.shared.sandbox.prepare` takes it (``None``: no network at all, as before) and
wires it by sandbox:

- bubblewrap: the network namespace stays empty but for its loopback; the proxy's socket is
  bound in at :data:`SOCKET_INSIDE` and :mod:`._bridge` relays ``127.0.0.1:PORT`` inside to it;
- Landlock: TCP ``connect`` is allowed to the proxy's port only (Landlock ABI >= 4: where the
  kernel is older the launch is refused, never given the whole network), and the seccomp filter
  of every Landlock launch without the full network closes UDP (:mod:`._launcher`).

Either way the command gets :func:`proxy_env`; a program that ignores those variables has no
way out. Pure but for :func:`bridge_python` (which looks at the disk).
"""

from __future__ import annotations

import functools
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from ._paths import SYSTEM_READABLE, within

__all__ = ["NO_PROXY", "SOCKET_INSIDE", "Egress", "bridge_argv", "bridge_python", "proxy_env"]

#: Where the proxy's unix socket appears inside a bubblewrap sandbox.
SOCKET_INSIDE: Final = "/run/jidocode-egress.sock"
#: Interpreters the bridge prefers: visible in every sandbox (under ``/usr`` or ``/bin``).
_SYSTEM_PYTHONS: Final = ("/usr/bin/python3", "/usr/local/bin/python3", "/bin/python3")
#: Destinations a proxied program reaches without the proxy: loopback, which the proxy always
#: refuses (a sandboxed command's own servers under bubblewrap). One rule for every proxied
#: program, sandboxed or not (``Pass.env`` of :mod:`jidocode.shared.egress` uses it too).
NO_PROXY: Final = "localhost,127.0.0.1,::1"


@dataclass(frozen=True, slots=True)
class Egress:
    """The egress proxy a sandboxed command may reach: its unix ``socket`` and its TCP ``port`` on
    ``127.0.0.1`` (both served by the same proxy, which decides every connection).

    ``proxy_url``: the URL the command's variables carry, with the call's credentials
    (``http://user:token@127.0.0.1:PORT``); default ``http://127.0.0.1:PORT``. Under bubblewrap
    the bridge listens inside on the same port number, so the one URL serves both sandboxes.
    """

    socket: str
    port: int
    proxy_url: str = ""

    def __post_init__(self) -> None:
        if not os.path.isabs(self.socket) or "\x00" in self.socket:
            raise ValueError(f"the egress proxy's socket must be an absolute path, not {self.socket!r}")
        if not 0 < self.port < 65536:
            raise ValueError(f"the egress proxy's port must be 1-65535, not {self.port}")
        bad_url = bool(self.proxy_url) and not self.proxy_url.startswith("http://")
        if bad_url or any(c in self.proxy_url for c in "\x00\r\n"):
            raise ValueError("the egress proxy's URL must be an http:// URL on one line")

    @property
    def url(self) -> str:
        """The proxy's address as the command's variables give it (the same port in every sandbox)."""
        return self.proxy_url or f"http://127.0.0.1:{self.port}"


def proxy_env(egress: Egress) -> dict[str, str]:
    """``HTTP_PROXY``, ``HTTPS_PROXY``, ``ALL_PROXY`` (and lowercase) at the proxy; ``NO_PROXY`` loopback."""
    env: dict[str, str] = {}
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY"):
        env[name] = env[name.lower()] = egress.url
    env["NO_PROXY"] = env["no_proxy"] = NO_PROXY
    return env


@functools.cache
def _bridge_source() -> str:
    return Path(__file__).with_name("_bridge.py").read_text(encoding="utf-8")


def bridge_python() -> tuple[str, str | None]:
    """The interpreter that runs the bridge in a bubblewrap sandbox, and the directory to bind
    read-only for it (``None``: a system one, visible already).

    A system ``python3`` when there is one; else this process's own interpreter, whose
    installation (``sys.base_prefix``, e.g. under the home, which the sandbox hides) is bound.
    """
    for candidate in _SYSTEM_PYTHONS:
        if os.access(candidate, os.X_OK):
            return candidate, None
    prefix = os.path.realpath(sys.base_prefix)
    real = os.path.realpath(sys.executable)
    python = real if within(real, prefix) else os.path.join(prefix, "bin", "python3")
    if any(within(prefix, top) for top in SYSTEM_READABLE):
        return python, None
    return python, prefix


def bridge_argv(python: str, egress: Egress, program: list[str]) -> list[str]:
    """``python -I -S -c <bridge> SOCKET PORT -- program…``: the bridge first, then the program."""
    return [python, "-I", "-S", "-c", _bridge_source(), SOCKET_INSIDE, str(egress.port), "--", *program]
