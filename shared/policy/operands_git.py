"""Which words of a ``git`` command name files, and what git does with them (pure).

Part of :func:`jidocode.shared.policy.operands.operands`: ``-C`` directories,
output and message files, ``init``/``clone``/``worktree add`` destinations,
``REV:path`` reads, ``git grep`` pathspecs, and the subcommands that rewrite
the work tree (anything in it may become a link).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Final

from .operand_model import ALL, Operands, PathUse, parse_options, use
from .operand_model import option_set as _f
from .programs import GIT_VALUE_OPTIONS, git_subcommand

_GIT_TREE_WRITERS: Final = frozenset(
    {
        "checkout",
        "switch",
        "restore",
        "reset",
        "merge",
        "pull",
        "rebase",
        "cherry-pick",
        "revert",
        "stash",
        "am",
        "apply",
        "read-tree",
        "checkout-index",
        "sparse-checkout",
        "submodule",
        "bisect",
    }
)
_GIT_SUB_VALUES: Final = _f(
    "-m", "--message", "-F", "-b", "-B", "--branch", "-o", "--output", "--output-directory", "--format",
    "--pretty", "-n", "--max-count", "--since", "--until", "--author", "--grep", "-S", "-G", "--depth",
    "--origin", "--remote", "--prefix", "-e", "--exclude", "--reference", "--separate-git-dir", "-U",
)  # fmt: skip


def git(argv: tuple[str, ...], out: Operands) -> None:
    """The path uses and links of one ``git`` command."""
    out.operand_kinds = ("read", "write")
    sub, sub_index = git_subcommand(argv)
    _global_directories(argv, sub_index or len(argv), out)
    if sub is None:
        return
    rest = (argv[0], *argv[sub_index + 1 :])
    ops, opts = parse_options(rest, _GIT_SUB_VALUES)
    shift = sub_index  # rest[k] is argv[k + shift] for k >= 1

    def at(k: int) -> int:
        return k + shift

    _option_files(sub, opts, at, out)
    _subcommand_operands(sub, rest, ops, {o[1] for o in opts}, at, out)
    if sub in _GIT_TREE_WRITERS:
        out.links.append((0, ALL))


def _global_directories(argv: tuple[str, ...], end: int, out: Operands) -> None:
    """``git -C DIR``: the options before the subcommand name where git runs."""
    i = 1
    while i < end:
        w = argv[i]
        if w == "-C" and i + 1 < len(argv):
            out.uses.append(use(argv, i + 1, "cwd"))
        if w in GIT_VALUE_OPTIONS:
            i += 2
            continue
        i += 1


def _option_files(
    sub: str, opts: list[tuple[int, str, str, bool]], at: Callable[[int], int], out: Operands
) -> None:
    """Files named by the subcommand's options: outputs, message files, templates."""
    for k, name, value, whole in opts:
        if name in ("--output", "--output-directory") or (
            name == "-o" and sub in ("archive", "format-patch")
        ):
            out.uses.append(PathUse(at(k), value, "write", whole))
        elif name in ("-F", "--file") and sub in ("commit", "tag", "notes"):
            out.uses.append(PathUse(at(k), value, "read", whole))
        elif name in ("--separate-git-dir", "--template", "--reference"):
            out.uses.append(PathUse(at(k), value, "write" if name == "--separate-git-dir" else "read", whole))


def _subcommand_operands(
    sub: str, rest: tuple[str, ...], ops: list[int], names: set[str], at: Callable[[int], int], out: Operands
) -> None:
    """What the subcommand does with its operands."""
    if sub == "init" and ops:
        out.uses.append(PathUse(at(ops[0]), rest[ops[0]], "write"))
    elif sub == "clone" and ops:
        _clone(rest, ops, at, out)
    elif sub == "worktree" and ops and rest[ops[0]] == "add" and len(ops) >= 2:
        out.uses.append(PathUse(at(ops[1]), rest[ops[1]], "write"))
        out.links.append((at(ops[1]), rest[ops[1]]))
    elif sub == "diff" and "--no-index" in names:
        for k in ops:
            out.uses.append(PathUse(at(k), rest[k], "read"))
    elif sub == "grep":
        _git_grep(rest, at, out)
    else:
        _revision_paths(rest, ops, at, out)


def _clone(rest: tuple[str, ...], ops: list[int], at: Callable[[int], int], out: Operands) -> None:
    """``git clone SRC [DIR]``: the new directory is written (and may hold links); a local source is read."""
    if len(ops) >= 2:
        out.uses.append(PathUse(at(ops[1]), rest[ops[1]], "write"))
        out.links.append((at(ops[1]), rest[ops[1]]))
    else:
        out.links.append((0, ALL))
    if not re.match(r"^[a-z+]+://|^[^/]*:", rest[ops[0]]):
        out.uses.append(PathUse(at(ops[0]), rest[ops[0]], "read_tree"))


def _revision_paths(rest: tuple[str, ...], ops: list[int], at: Callable[[int], int], out: Operands) -> None:
    """Other subcommands: ``REV:path`` reads a file; any other operand is a mention."""
    for k in ops:
        word = rest[k]
        if ":" in word and not word.startswith(":/"):
            _rev, _, path = word.partition(":")
            if path and not re.fullmatch(r"[A-Za-z0-9_.+-]*//.*", path):
                out.uses.append(PathUse(at(k), path, "read", whole=False))  # REV:path shows a file
            continue
        out.uses.append(PathUse(at(k), word, "mention"))


_GIT_GREP_VALUES: Final = _f(
    "-e", "-f", "-A", "-B", "-C", "-m", "--max-count", "--max-depth", "--threads", "--context",
    "--after-context", "--before-context", "--color", "--open-files-in-pager", "-O",
)  # fmt: skip


def _git_grep(rest: tuple[str, ...], at: Callable[[int], int], out: Operands) -> None:
    """``git grep [opts] [pattern] [tree…] [--] [pathspec…]``: the pathspecs are read (tracked files)."""
    split = rest.index("--") if "--" in rest else len(rest)
    ops, opts = parse_options(rest[:split], _GIT_GREP_VALUES)
    if not ({o[1] for o in opts} & {"-e", "-f"}) and ops:
        ops = ops[1:]  # the pattern
    # without ``--``, trees and pathspecs: a tree name reads as a path that does not exist
    paths = list(range(split + 1, len(rest))) if split < len(rest) else ops
    for k in paths:
        out.uses.append(PathUse(at(k), rest[k], "read_tree"))
    if not paths:
        out.uses.append(PathUse(0, ".", "read_tree", whole=False))
