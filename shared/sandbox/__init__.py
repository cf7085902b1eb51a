"""The OS sandbox of every process a tool starts (bash today; hook commands and MCP stdio servers next).

The word-level policy decides *what may start*; this package decides *what a
started process can touch*, whatever the command line says:

- :mod:`._mode`: which sandbox a call gets — ``sandbox.mode`` (``auto``,
  ``bubblewrap``, ``landlock``, ``off``; ``off`` is read only from the user's
  global settings; ``JIDO_SANDBOX_MODE`` may replace the global mode, never with
  ``off``) against what :mod:`._detect` finds on this machine;
- :mod:`._bwrap`: the bubblewrap command line (pure): new user, mount, pid,
  ipc, uts, cgroup and network namespaces; ``/`` read-only; the project root
  read-write with its protected paths read-only; an empty home, private
  ``/tmp`` and ``/run``, its own ``/proc`` and ``/dev``; no capabilities;
- :mod:`._launcher`: Landlock through ctypes, and the launcher that runs a
  command under it as a child subreaper (where bubblewrap cannot run);
- :mod:`._guard`: protected paths captured before a call, watched while it
  runs (:mod:`._watch`: a change is put back at once and stops the call) and
  repaired after it (what bubblewrap cannot bind, and everything under Landlock);
  the snapshot and its repair are :mod:`._snapshot`, the git directory held and
  put back where it was is :mod:`._gitdir`;
- :mod:`._env`: the scrubbed environment and git's pinned configuration;
- :mod:`._paths`: the protected, hidden and readable paths;
- :mod:`._namespace`: the pid namespace of a bubblewrap call, ended by killing
  its first process (whenever the stop comes);
- :mod:`._egress`: :class:`Egress`, the egress proxy a launch may reach and nothing else of the
  network (bubblewrap: its socket bridged into the namespace by :mod:`._bridge`; Landlock: TCP
  to its port only, and a seccomp filter that closes UDP in every Landlock launch without the
  full network);
- :mod:`._launch`: :func:`prepare`, the I/O that puts the plans together;
- :mod:`._run`: :func:`run_command`, which runs a prepared launch to its end (output capped,
  timeout, nothing left behind): the bash tool and the PRD loop's quality checks.

Refusals are :class:`~jidocode.shared.errors.PermissionDenied` with
``details.sandbox`` = ``unavailable`` (no sandbox works and the user did not
turn it off), ``protected_too_large`` (Landlock cannot keep a protected
path that large), ``egress_unconfinable`` (the egress proxy under a Landlock
that cannot keep TCP to its port: ABI < 4) or ``protected_unwatched`` (no inotify instance left); a call
that changed a protected path fails with ``protected_changed`` (the bash tool).
See docs/security.md ("OS sandbox") and docs/deploy.md.
"""

from __future__ import annotations

from ._bwrap import Mount, bwrap_argv
from ._detect import Capabilities, detect
from ._egress import NO_PROXY, Egress
from ._env import ENV_ALLOWLIST, GIT_PINS, sandbox_env
from ._guard import GUARD, Guard, TooLarge, capture, repair
from ._launch import LAUNCHER, Launch, prepare
from ._launcher import abi as landlock_abi
from ._mode import INSTALL_HINT, MODE_ENV, Choice, choose, effective_settings, forced_mode
from ._namespace import Namespace, child_pid
from ._paths import PROTECTED, hidden_at, hidden_paths, protected_rels, read_cover, runtime_hidden
from ._run import TRUNCATION_MARK, OnChunk, cap_text, run_command

__all__ = [
    "ENV_ALLOWLIST",
    "GIT_PINS",
    "GUARD",
    "INSTALL_HINT",
    "LAUNCHER",
    "MODE_ENV",
    "NO_PROXY",
    "PROTECTED",
    "TRUNCATION_MARK",
    "Capabilities",
    "Choice",
    "Egress",
    "Guard",
    "Launch",
    "Mount",
    "Namespace",
    "OnChunk",
    "TooLarge",
    "bwrap_argv",
    "cap_text",
    "capture",
    "child_pid",
    "choose",
    "detect",
    "effective_settings",
    "forced_mode",
    "hidden_at",
    "hidden_paths",
    "landlock_abi",
    "prepare",
    "protected_rels",
    "read_cover",
    "repair",
    "run_command",
    "runtime_hidden",
    "sandbox_env",
]
