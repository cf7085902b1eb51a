"""Wrapper programs (``env``, ``xargs``, ``timeout``, ``sudo`` …): where the command they run starts.

Pure: :func:`unwrap` reads a wrapper's own options and says at which word
its inner command begins, which ``NAME=value`` assignments it adds, and
whether more arguments arrive at run time (``xargs``). A wrapper option the
walk cannot follow (``env -S``, ``sudo -s``, ``doas -C`` …) raises
:class:`~jidocode.shared.policy.shell_model.Unprovable`. Used by
:mod:`jidocode.shared.policy.shell`.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from typing import Final

from .shell_model import Unprovable

__all__ = ["Inner", "unwrap"]

#: (index of the inner command, env assignments the wrapper adds, more arguments at run time).
Inner = tuple[int, tuple[str, ...], bool]

_ASSIGNMENT: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=.*", re.DOTALL)


def _any_flag(word: str) -> bool:
    return True


def _skip(
    argv: tuple[str, ...], i: int, with_value: frozenset[str], flags_ok: Callable[[str], bool] = _any_flag
) -> int:
    """The index of the first word from ``i`` on that is not one of the wrapper's options."""
    n = len(argv)
    while i < n:
        w = argv[i]
        if w == "--":
            return i + 1
        if w in with_value:
            i += 2
        elif w.startswith("-") and len(w) > 1 and flags_ok(w):
            i += 1
        else:
            return i
    return i


def _assignments_from(argv: tuple[str, ...], i: int, assigns: list[str]) -> int:
    """Append the ``NAME=value`` words from ``i`` on to ``assigns``; the index after them."""
    while i < len(argv) and _ASSIGNMENT.fullmatch(argv[i]):
        assigns.append(argv[i])
        i += 1
    return i


#: Wrappers whose inner command follows their options: the options taking a value, which
#: other flags they accept, and whether the inner command gets more arguments at run time.
_OPTION_WRAPPERS: Final[dict[str, tuple[frozenset[str], Callable[[str], bool], bool]]] = {
    "nice": (frozenset({"-n", "--adjustment"}), _any_flag, False),
    "stdbuf": (frozenset({"-i", "-o", "-e"}), _any_flag, False),
    "setsid": (frozenset(), _any_flag, False),
    "exec": (frozenset({"-a"}), lambda w: w in ("-c", "-l", "-cl", "-lc"), False),
    "xargs": (
        frozenset(
            {
                "-a",
                "-d",
                "-E",
                "-I",
                "-L",
                "-n",
                "-P",
                "-s",
                "--arg-file",
                "--delimiter",
                "--max-args",
                "--max-procs",
                "--max-chars",
                "--max-lines",
                "--replace",
            }
        ),
        _any_flag,
        True,
    ),
    "pkexec": (frozenset({"--user"}), _any_flag, False),
}


def _timeout(argv: tuple[str, ...]) -> Inner | None:
    i = _skip(argv, 1, frozenset({"-s", "--signal", "-k", "--kill-after"}))
    return (i + 1, (), False)  # the duration


def _ionice(argv: tuple[str, ...]) -> Inner | None:
    if "-p" in argv or "-P" in argv:
        return None  # changes a running process: runs no command
    return (_skip(argv, 1, frozenset({"-c", "-n"})), (), False)


def _command(argv: tuple[str, ...]) -> Inner | None:
    if len(argv) > 1 and argv[1] in ("-v", "-V"):
        return None  # only describes the command
    return (_skip(argv, 1, frozenset(), lambda w: w == "-p"), (), False)


def _env(argv: tuple[str, ...]) -> Inner | None:
    i = 1
    assigns: list[str] = []
    while i < len(argv):
        w = argv[i]
        if w in ("-S", "--split-string") or w.startswith(("-S", "--split-string")):
            raise Unprovable("env -S splits a string into a command")
        if w.startswith(("-C", "--chdir")):
            raise Unprovable("env -C runs the command in another directory")
        if w in ("-u", "--unset"):
            i += 2
        elif w == "--":
            i += 1
            break
        elif w.startswith("-"):
            i += 1
        elif _ASSIGNMENT.fullmatch(w):
            assigns.append(w)
            i += 1
        else:
            break
    i = _assignments_from(argv, i, assigns)
    return (i, tuple(assigns), False)


_SUDO_VALUES: Final = frozenset(
    {"-u", "-g", "-C", "-D", "-h", "-p", "-r", "-t", "-U", "-T", "--user", "--group"}
)


def _sudo(argv: tuple[str, ...]) -> Inner | None:
    for w in argv[1:]:
        if not w.startswith("-"):
            break
        if w in ("-s", "-i", "-e", "--shell", "--login", "--edit") or (
            not w.startswith("--") and set(w[1:]) & {"s", "i", "e"}
        ):
            raise Unprovable(f"sudo {w} runs a shell or an editor")
    assigns: list[str] = []
    i = _assignments_from(argv, _skip(argv, 1, _SUDO_VALUES), assigns)
    return (i, tuple(assigns), False)


def _doas(argv: tuple[str, ...]) -> Inner | None:
    if "-s" in argv[1:2] or "-C" in argv:
        raise Unprovable("doas -s/-C")
    return (_skip(argv, 1, frozenset({"-u"})), (), False)


_SPECIAL_WRAPPERS: Final[dict[str, Callable[[tuple[str, ...]], Inner | None]]] = {
    "nohup": lambda argv: (1, (), False),
    "builtin": lambda argv: (1, (), False),
    "timeout": _timeout,
    "ionice": _ionice,
    "command": _command,
    "env": _env,
    "sudo": _sudo,
    "doas": _doas,
}


def unwrap(argv: tuple[str, ...]) -> Inner | None:
    """For a wrapper: (index of the inner command, env assignments it adds, open args); else ``None``."""
    base = os.path.basename(argv[0])
    special = _SPECIAL_WRAPPERS.get(base)
    if special is not None:
        return special(argv)
    options = _OPTION_WRAPPERS.get(base)
    if options is None:
        return None
    with_value, flags_ok, open_args = options
    return (_skip(argv, 1, with_value, flags_ok), (), open_args)
