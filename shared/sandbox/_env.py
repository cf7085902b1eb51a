"""The environment of a sandboxed command (pure): an allowlist, fixed values, and git's pinned keys."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable, Mapping
from pathlib import PurePosixPath
from typing import Final

__all__ = ["ENV_ALLOWLIST", "GIT_PINS", "sandbox_env"]

#: Variables of the runner's environment that reach the command; everything else is dropped
#: (NATS credentials, LLM keys, cloud tokens, ``LD_PRELOAD`` …).
ENV_ALLOWLIST: Final[frozenset[str]] = frozenset(
    {"PATH", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "USER", "LOGNAME"}
)

#: Repository configuration keys that run programs, pinned on git's command-line layer (which wins
#: over the repository's own ``.git/config``). ``diff.external`` keeps ``git diff`` working: it is
#: pinned to a plain ``diff -u`` of the two versions (an empty value would make ``git diff`` fail).
#: The gpg programs become ``false`` (signing and verifying fail, nothing runs);
#: ``core.alternateRefsCommand`` is run by the shell with any value: ``true`` lists no ref. Not
#: pinned: ``uploadpack.packObjectsHook`` (git reads it only from the system and global layers
#: and the command line, so a pin would be the one way to turn it on). Driver-named keys
#: (``filter.<x>.clean`` …) depend on the repository's names: the PRD loop's git pins them per
#: repository (``services/prd/gitrun.py``); a model's own git runs only in the sandbox.
GIT_PINS: Final[tuple[tuple[str, str], ...]] = (
    ("safe.bareRepository", "explicit"),
    ("core.fsmonitor", "false"),
    ("core.hooksPath", "/dev/null"),
    ("core.pager", "cat"),
    ("core.sshCommand", "ssh"),
    ("core.editor", "true"),
    ("sequence.editor", "true"),
    ("core.askPass", ""),
    ("credential.helper", ""),
    ("protocol.ext.allow", "never"),
    ("diff.external", 'f() { diff -u --label "a/$1" --label "b/$1" -- "$2" "$5"; test $? -le 1; }; f'),
    ("core.alternateRefsCommand", "true"),
    ("gpg.program", "false"),
    ("gpg.openpgp.program", "false"),
    ("gpg.x509.program", "false"),
    ("gpg.ssh.program", "false"),
    ("gpg.ssh.defaultKeyCommand", "false"),
)

_FIXED: Final[dict[str, str]] = {
    "TERM": "dumb",
    "NO_COLOR": "1",
    "PAGER": "cat",
    "GIT_PAGER": "cat",
    "GIT_TERMINAL_PROMPT": "0",
    "GIT_CONFIG_NOSYSTEM": "1",
    "SHELL": "/bin/bash",
    # Python writes no __pycache__ beside what it imports: a skill's script lives in the protected
    # data dir, where the folder would be a change the guard puts back and stops the call for
    "PYTHONDONTWRITEBYTECODE": "1",
}
DEFAULT_PATH: Final = "/usr/local/bin:/usr/bin:/bin"


def own_venv_bin() -> str | None:
    """The ``bin`` directory of the virtual environment JidoCode runs in (``None`` outside one).

    ``./dev`` and an activated venv put it first on ``PATH``; a command would then
    run JidoCode's ``python``, ``pip`` and ``pytest`` instead of the project's.
    """
    return os.path.join(sys.prefix, "bin") if sys.prefix != sys.base_prefix else None


def _inside(path: str, bases: Iterable[str]) -> bool:
    p = PurePosixPath(os.path.normpath(path)).parts
    return any(p[: len(b)] == b for b in (PurePosixPath(x).parts for x in bases))


def sandbox_env(
    source: Mapping[str, str],
    *,
    home: str,
    tmpdir: str,
    hidden: Iterable[str] = (),
    visible: Iterable[str] = (),
    own_bin: str | None = own_venv_bin(),
) -> dict[str, str]:
    """The whole environment of a command: the allowlist of ``source``, fixed values, git's pins.

    ``PATH`` loses its relative entries and those under a ``hidden`` path (the
    runner's home: the command could not run what is there anyway, and a
    shell would stop at the first match instead of looking further) unless a
    ``visible`` path (an additional directory, bound again) holds them. It also
    loses ``own_bin``, JidoCode's own venv (:func:`own_venv_bin`).
    """
    env = {k: v for k, v in source.items() if k in ENV_ALLOWLIST}
    hidden, visible = tuple(hidden), tuple(visible)
    entries = [
        p
        for p in env.get("PATH", "").split(":")
        if os.path.isabs(p)
        and (not _inside(p, hidden) or _inside(p, visible))
        and (own_bin is None or os.path.normpath(p) != os.path.normpath(own_bin))
    ]
    env["PATH"] = ":".join(entries) or DEFAULT_PATH
    env.update(_FIXED)
    env["HOME"] = home
    env["TMPDIR"] = tmpdir
    env["GIT_CONFIG_COUNT"] = str(len(GIT_PINS))
    for i, (key, value) in enumerate(GIT_PINS):
        env[f"GIT_CONFIG_KEY_{i}"] = key
        env[f"GIT_CONFIG_VALUE_{i}"] = value
    return env
