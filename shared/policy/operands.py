"""Which words of a command name files, and what the program does with them (pure tables).

:func:`operands` reads one simple command (``argv``) the way its program
would — options with values, the pattern of ``grep``, the script of ``sed``,
the program of ``awk``, the destination of ``cp`` — and returns each word
that names a path with how it is used:

=============  ==============================================================
``read``       the file's content (or a directory's entries) is read
``read_tree``  everything below the directory is read (``grep -r``, ``rg``, ``find``, ``tar c``)
``write``      the path is created, changed or removed
``cwd``        the program runs there (``git -C``)
``link``       the target of a link being created (``ln -s TARGET name``)
``mention``    a program not in these tables was given the path: unknown use
=============  ==============================================================

Programs that copy or link into a directory return a :class:`Transfer`, so
the decision can see where each name lands (``cp -r payload/. .`` writes
unknown names into the project root), and :attr:`Operands.links` names the
paths that may become links during the call (``ln``, ``cp -r``, ``mv``,
``git checkout``, archive extraction), which makes later paths through them
unknowable. This is a reading of the command line, not of what a program
really opens; docs/security.md says what it does not claim.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final, Literal

from .programs import GIT_VALUE_OPTIONS, awk_split, git_subcommand, sed_split, tar_extracts

__all__ = ["ALL", "NON_FILE", "Operands", "PathUse", "Transfer", "UseKind", "operands"]

UseKind = Literal["read", "read_tree", "write", "cwd", "link", "mention"]
#: A link destination that covers everything (the whole work tree may change).
ALL: Final = "\x00all"


@dataclass(frozen=True)
class PathUse:
    """One word (or the value inside one word) that names a path."""

    index: int
    text: str
    kind: UseKind
    #: The path is the whole word, so bash's globbing applies to it.
    whole: bool = True


@dataclass(frozen=True)
class Transfer:
    """``cp``/``mv``/``ln``/``install``/``rsync``: sources put into a destination."""

    sources: tuple[tuple[int, str], ...]
    dest: tuple[int, str]
    #: ``True``: the destination is a directory; ``None``: it is one if it exists as one.
    into_dir: bool | None
    recursive: bool
    #: The sources become links (``ln``) or links are copied as links.
    makes_links: bool


@dataclass
class Operands:
    uses: list[PathUse] = field(default_factory=list)
    transfer: Transfer | None = None
    #: Paths that may become links during the call: (word index, text); ``text == ALL`` for the tree.
    links: list[tuple[int, str]] = field(default_factory=list)
    #: The program is in the tables (its file operands are known); else its words are mentions.
    known: bool = True
    #: What the program does with an operand (``xargs`` appends operands at run time).
    operand_kinds: tuple[UseKind, ...] = ("read",)


#: Programs whose arguments are not file names.
NON_FILE: Final = frozenset(
    {
        "echo",
        "printf",
        "true",
        "false",
        ":",
        "test",
        "[",
        "basename",
        "dirname",
        "seq",
        "sleep",
        "date",
        "expr",
        "id",
        "whoami",
        "uname",
        "hostname",
        "yes",
        "pwd",
        "exit",
        "return",
        "break",
        "continue",
        "shift",
        "cd",
        "pushd",
        "popd",
        "wait",
        "set",
        "type",
        "which",
        "command",
        "kill",
        "printenv",
        "nproc",
        "arch",
        "tty",
        "groups",
        "getopts",
        "read",
        "unset",
        "env",
        "sudo",
        "doas",
        "pkexec",
        "jobs",
        "times",
    }
)


@dataclass(frozen=True)
class _Spec:
    """How a reader takes its arguments."""

    #: Options that take a separate value (short ``-x`` and long ``--xx``).
    values: frozenset[str] = frozenset()
    #: Options whose value is a file read / written.
    reads: frozenset[str] = frozenset()
    writes: frozenset[str] = frozenset()
    #: The first operand is not a path (a pattern, a filter) unless one of ``given`` supplied it.
    skip_first: bool = False
    given: frozenset[str] = frozenset()
    #: Operands are read recursively always, or when one of these options is present.
    tree: bool = False
    tree_when: frozenset[str] = frozenset()
    #: Without operands the program reads the working directory.
    default_dot: bool = False
    #: Operands are written, not read.
    writes_operands: bool = False
    #: Operands to skip at the start (``chmod MODE file``) unless ``--reference`` is given.
    skip_lead: int = 0
    #: ``PROG in out``: the second operand is written (``uniq``, ``xxd``).
    second_writes: bool = False


def _f(*names: str) -> frozenset[str]:
    return frozenset(names)


_GREP = _Spec(
    values=_f(
        "-e",
        "--regexp",
        "-f",
        "--file",
        "-m",
        "--max-count",
        "-A",
        "-B",
        "-C",
        "--after-context",
        "--before-context",
        "--context",
        "-d",
        "--directories",
        "-D",
        "--devices",
        "--label",
        "--exclude-from",
        "--binary-files",
        "--group-separator",
    ),
    reads=_f("-f", "--file", "--exclude-from"),
    skip_first=True,
    given=_f("-e", "--regexp", "-f", "--file"),
    tree_when=_f("-r", "-R", "--recursive", "--dereference-recursive"),
)
_RG = _Spec(
    values=_f(
        "-e",
        "--regexp",
        "-f",
        "--file",
        "-g",
        "--glob",
        "--iglob",
        "-t",
        "--type",
        "-T",
        "--type-not",
        "--type-add",
        "--type-clear",
        "-m",
        "--max-count",
        "-A",
        "-B",
        "-C",
        "--context",
        "--after-context",
        "--before-context",
        "-j",
        "--threads",
        "-M",
        "--max-columns",
        "--max-depth",
        "-d",
        "-E",
        "--encoding",
        "--sort",
        "--sortr",
        "--color",
        "--colors",
        "--pre",
        "--pre-glob",
        "--ignore-file",
        "-r",
        "--replace",
        "--path-separator",
        "--max-filesize",
        "--engine",
        "--context-separator",
        "--field-match-separator",
        "--field-context-separator",
        "--dfa-size-limit",
        "--regex-size-limit",
    ),
    reads=_f("-f", "--file", "--ignore-file", "--pre"),
    skip_first=True,
    given=_f("-e", "--regexp", "-f", "--file"),
    tree=True,
    default_dot=True,
)
_SIMPLE = _Spec()
_N = _Spec(values=_f("-n", "-c", "--lines", "--bytes", "-s", "--sleep-interval", "--pid"))
_READERS: Final[dict[str, _Spec]] = {
    "cat": _SIMPLE,
    "tac": _SIMPLE,
    "nl": _Spec(values=_f("-b", "-d", "-f", "-h", "-i", "-l", "-n", "-s", "-v", "-w")),
    "head": _N,
    "tail": _N,
    "less": _Spec(
        values=_f(
            "-b", "-h", "-j", "-o", "-O", "-p", "-P", "-t", "-T", "-x", "-y", "-z", "--log-file", "--LOG-FILE"
        ),
        writes=_f("-o", "-O", "--log-file", "--LOG-FILE"),
    ),
    "more": _SIMPLE,
    "wc": _Spec(reads=_f("--files0-from")),
    "od": _Spec(values=_f("-A", "-j", "-N", "-t", "-w", "-S")),
    "xxd": _Spec(values=_f("-c", "-g", "-l", "-o", "-s", "-n"), second_writes=True),
    "hexdump": _Spec(values=_f("-e", "-f", "-n", "-s"), reads=_f("-f")),
    "strings": _Spec(values=_f("-n", "-t", "-e")),
    "file": _Spec(values=_f("-m", "-f", "-F", "-P"), reads=_f("-m", "-f")),
    "stat": _Spec(values=_f("-c", "--format", "--printf")),
    "md5sum": _SIMPLE,
    "sha1sum": _SIMPLE,
    "sha256sum": _SIMPLE,
    "sha512sum": _SIMPLE,
    "b2sum": _SIMPLE,
    "cksum": _SIMPLE,
    "base64": _Spec(values=_f("-w", "--wrap")),
    "base32": _Spec(values=_f("-w", "--wrap")),
    "cut": _Spec(values=_f("-b", "-c", "-d", "-f", "--delimiter", "--output-delimiter")),
    "paste": _Spec(values=_f("-d", "--delimiters")),
    "join": _Spec(values=_f("-1", "-2", "-a", "-e", "-j", "-o", "-t", "-v")),
    "comm": _Spec(values=_f("--output-delimiter")),
    "cmp": _Spec(values=_f("-i", "-n", "--ignore-initial", "--bytes")),
    "diff": _Spec(
        values=_f("-U", "-C", "-L", "--label", "-x", "--exclude", "-X", "--exclude-from", "-I", "-F"),
        reads=_f("-X", "--exclude-from"),
        tree_when=_f("-r", "--recursive"),
    ),
    "uniq": _Spec(values=_f("-f", "-s", "-w"), second_writes=True),
    "fold": _Spec(values=_f("-w")),
    "fmt": _Spec(values=_f("-w", "-p")),
    "column": _Spec(values=_f("-s", "-c", "-o", "-t", "-N")),
    "expand": _Spec(values=_f("-t")),
    "unexpand": _Spec(values=_f("-t")),
    "iconv": _Spec(values=_f("-f", "-t", "-o"), writes=_f("-o", "--output")),
    "zcat": _SIMPLE,
    "bzcat": _SIMPLE,
    "xzcat": _SIMPLE,
    "readlink": _SIMPLE,
    "realpath": _Spec(values=_f("--relative-to", "--relative-base")),
    "ls": _Spec(
        values=_f("-I", "--ignore", "--hide", "-w", "--width", "-T", "--tabsize", "--format", "--sort"),
        tree_when=_f("-R", "--recursive"),
        default_dot=True,
    ),
    "du": _Spec(
        values=_f("-d", "--max-depth", "-t", "--threshold", "--exclude", "-B"), tree=True, default_dot=True
    ),
    "tree": _Spec(
        values=_f("-L", "-I", "-P", "-o", "--filelimit"), writes=_f("-o"), tree=True, default_dot=True
    ),
    "grep": _GREP,
    "egrep": _GREP,
    "fgrep": _GREP,
    "rg": _RG,
    "ag": _Spec(
        values=_f("-G", "--file-search-regex", "--ignore", "-A", "-B", "-C", "-m"),
        skip_first=True,
        tree=True,
        default_dot=True,
    ),
    "ack": _Spec(values=_f("--type", "-A", "-B", "-C", "-m"), skip_first=True, tree=True, default_dot=True),
    "jq": _Spec(
        values=_f("--arg", "--argjson", "--slurpfile", "--rawfile", "--indent", "-f", "--from-file", "-L"),
        reads=_f("-f", "--from-file"),
        skip_first=True,
        given=_f("-f", "--from-file"),
    ),
    "sort": _Spec(
        values=_f(
            "-o",
            "--output",
            "-t",
            "--field-separator",
            "-k",
            "--key",
            "-S",
            "--buffer-size",
            "-T",
            "--temporary-directory",
            "--compress-program",
            "--files0-from",
            "--parallel",
            "--batch-size",
            "--random-source",
        ),
        reads=_f("--files0-from", "--random-source"),
        writes=_f("-o", "--output", "-T", "--temporary-directory"),
    ),
    "shuf": _Spec(values=_f("-n", "-o", "--output", "--random-source", "-i"), writes=_f("-o", "--output")),
    "tee": _Spec(writes_operands=True),
    "touch": _Spec(
        values=_f("-r", "-d", "-t", "--reference", "--date"),
        reads=_f("-r", "--reference"),
        writes_operands=True,
    ),
    "truncate": _Spec(
        values=_f("-s", "-r", "--size", "--reference"), reads=_f("-r", "--reference"), writes_operands=True
    ),
    "rm": _Spec(writes_operands=True),
    "rmdir": _Spec(writes_operands=True),
    "unlink": _Spec(writes_operands=True),
    "shred": _Spec(values=_f("-n", "-s", "--iterations", "--size", "--random-source"), writes_operands=True),
    "mkdir": _Spec(values=_f("-m", "--mode", "--context"), writes_operands=True),
    "chmod": _Spec(values=_f("--reference"), reads=_f("--reference"), writes_operands=True, skip_lead=1),
    "chown": _Spec(
        values=_f("--reference", "--from"), reads=_f("--reference"), writes_operands=True, skip_lead=1
    ),
    "chgrp": _Spec(values=_f("--reference"), reads=_f("--reference"), writes_operands=True, skip_lead=1),
    "find": _Spec(),  # handled below
}

_CP_VALUES: Final = _f("-t", "--target-directory", "-S", "--suffix")
_INSTALL_VALUES: Final = _f(
    "-t", "--target-directory", "-S", "--suffix", "-m", "--mode", "-o", "--owner", "-g", "--group"
)
_RSYNC_VALUES: Final = _f(
    "-e", "--rsh", "--rsync-path", "--exclude", "--include", "--exclude-from", "--include-from",
    "--files-from", "-f", "--filter", "-T", "--temp-dir", "--partial-dir", "--backup-dir", "--log-file",
    "--link-dest", "--copy-dest", "--compare-dest", "--chmod", "--chown", "-B", "--block-size",
    "--max-size", "--min-size", "--timeout", "--port", "--password-file", "--bwlimit",
)  # fmt: skip


def _parse(
    argv: tuple[str, ...], values: frozenset[str]
) -> tuple[list[int], list[tuple[int, str, str, bool]]]:
    """(operand indexes, options as (index, name, value, value_is_whole_word)); GNU-style, options anywhere."""
    operands: list[int] = []
    options: list[tuple[int, str, str, bool]] = []
    i, n = 1, len(argv)
    while i < n:
        w = argv[i]
        if w == "--":
            operands.extend(range(i + 1, n))
            break
        if w.startswith("--"):
            name, eq, value = w.partition("=")
            if eq:
                options.append((i, name, value, False))
            elif name in values and i + 1 < n:
                options.append((i + 1, name, argv[i + 1], True))
                i += 1
            else:
                options.append((i, name, "", False))
        elif re.fullmatch(r"-\d+", w):
            options.append((i, w, "", False))  # head -5
        elif w.startswith("-") and len(w) > 1:
            j = 1
            while j < len(w):
                o = "-" + w[j]
                if o in values:
                    value = w[j + 1 :]
                    if value:
                        options.append((i, o, value, False))
                    elif i + 1 < n:
                        options.append((i + 1, o, argv[i + 1], True))
                        i += 1
                    break
                options.append((i, o, "", False))
                j += 1
        else:
            operands.append(i)
        i += 1
    return operands, options


def _use(argv: tuple[str, ...], i: int, kind: UseKind) -> PathUse:
    return PathUse(i, argv[i], kind)


def _reader(argv: tuple[str, ...], spec: _Spec, out: Operands) -> None:
    ops, opts = _parse(argv, spec.values)
    names = {o[1] for o in opts}
    for idx, name, value, whole in opts:
        if name in spec.reads and value:
            out.uses.append(PathUse(idx, value, "read", whole))
        elif name in spec.writes and value:
            out.uses.append(PathUse(idx, value, "write", whole))
    if spec.skip_first and not (names & spec.given) and ops:
        ops = ops[1:]
    if spec.skip_lead and "--reference" not in names:
        ops = ops[spec.skip_lead :]
    if spec.writes_operands:
        kind: UseKind = "write"
    else:
        kind = "read_tree" if spec.tree or (names & spec.tree_when) else "read"
    out.operand_kinds = (kind, "write") if spec.second_writes else (kind,)
    for n, i in enumerate(ops):
        if argv[i] != "-":
            out.uses.append(_use(argv, i, "write" if spec.second_writes and n == 1 else kind))
    if not ops and (spec.default_dot or (kind == "read_tree" and spec.tree_when)):
        out.uses.append(PathUse(0, ".", kind, whole=False))


def _find(argv: tuple[str, ...], out: Operands) -> None:
    out.operand_kinds = ("read_tree",)
    i = 1
    while i < len(argv) and argv[i] in ("-H", "-L", "-P"):
        i += 1
    starts: list[int] = []
    while i < len(argv) and not (argv[i].startswith("-") or argv[i] in ("(", "!", ",")):
        starts.append(i)
        i += 1
    for j in starts:
        out.uses.append(_use(argv, j, "read_tree"))
    if not starts:
        out.uses.append(PathUse(0, ".", "read_tree", whole=False))


def _transfer(argv: tuple[str, ...], base: str, out: Operands) -> None:
    values = {"install": _INSTALL_VALUES, "rsync": _RSYNC_VALUES}.get(base, _CP_VALUES)
    out.operand_kinds = ("read_tree", "write")
    ops, opts = _parse(argv, values)
    names = {o[1] for o in opts}
    target = next((o for o in opts if o[1] in ("-t", "--target-directory")), None)
    if base == "rsync":
        ops = [i for i in ops if not re.match(r"^[^/]*:", argv[i])]  # host:path is remote
        for idx, name, value, whole in opts:
            if name in ("--exclude-from", "--include-from", "--files-from", "--password-file") and value:
                out.uses.append(PathUse(idx, value, "read", whole))
            elif name in ("--log-file", "-T", "--temp-dir", "--backup-dir", "--partial-dir") and value:
                out.uses.append(PathUse(idx, value, "write", whole))
    recursive = bool(names & {"-r", "-R", "--recursive", "-a", "--archive"})
    if base in ("ln", "link"):
        makes_links = True
    elif base == "cp":
        makes_links = recursive or bool(
            names & {"-s", "-l", "--symbolic-link", "--link", "-P", "-d", "--no-dereference"}
        )
    else:
        makes_links = base in ("mv", "rsync")
    if base == "install" and "-d" in names:
        for i in ops:
            out.uses.append(_use(argv, i, "write"))
        return
    if target is not None:
        dest = (target[0], target[2])
        sources = ops
        into_dir: bool | None = True
    elif base in ("ln", "link") and len(ops) == 1:
        dest = (0, ".")
        sources = ops
        into_dir = True
    elif len(ops) >= 2:
        dest = (ops[-1], argv[ops[-1]])
        sources = ops[:-1]
        if "-T" in names or "--no-target-directory" in names:
            into_dir = False
        elif len(sources) > 1 or dest[1].endswith("/") or dest[1] in (".", "..") or base == "rsync":
            into_dir = True
        else:
            into_dir = None
    else:
        for i in ops:
            out.uses.append(_use(argv, i, "read"))
        return
    src_kind: UseKind = "link" if base in ("ln", "link") else ("write" if base == "mv" else "read")
    if src_kind == "read" and recursive:
        src_kind = "read_tree"
    for i in sources:
        out.uses.append(_use(argv, i, src_kind))
        if base == "mv":
            out.uses.append(_use(argv, i, "read_tree"))  # what moves is exposed at its new name
    out.transfer = Transfer(
        sources=tuple((i, argv[i]) for i in sources),
        dest=dest,
        into_dir=into_dir,
        recursive=recursive or base in ("mv", "rsync"),
        makes_links=makes_links,
    )


def _dd(argv: tuple[str, ...], out: Operands) -> None:
    out.operand_kinds = ("read", "write")
    for i, w in enumerate(argv[1:], start=1):
        if w.startswith("if="):
            out.uses.append(PathUse(i, w[3:], "read", whole=False))
        elif w.startswith("of="):
            out.uses.append(PathUse(i, w[3:], "write", whole=False))


def _sed(argv: tuple[str, ...], out: Operands) -> None:
    _, files, in_place, _ = sed_split(argv)
    out.operand_kinds = ("write",) if in_place else ("read",)
    for i in files:
        if argv[i] != "-":
            out.uses.append(_use(argv, i, "write" if in_place else "read"))


def _awk(argv: tuple[str, ...], out: Operands) -> None:
    _, files, _ = awk_split(argv)
    for i in files:
        if argv[i] != "-":
            out.uses.append(_use(argv, i, "read"))


def _tar(argv: tuple[str, ...], out: Operands) -> None:
    extract = tar_extracts(argv)
    out.operand_kinds = ("read_tree", "write")
    old_style = len(argv) > 1 and not argv[1].startswith("-")
    ops, opts = _parse(
        argv, _f("-f", "--file", "-C", "--directory", "-T", "--files-from", "-X", "--exclude-from")
    )
    if old_style:
        ops = ops[1:]
        if "f" in argv[1] and ops:
            out.uses.append(_use(argv, ops[0], "read" if extract else "write"))
            ops = ops[1:]
    dest: tuple[int, str] | None = None
    for idx, name, value, whole in opts:
        if name in ("-f", "--file") and value != "-":
            out.uses.append(PathUse(idx, value, "read" if extract else "write", whole))
        elif name in ("-T", "--files-from", "-X", "--exclude-from"):
            out.uses.append(PathUse(idx, value, "read", whole))
        elif name in ("-C", "--directory"):
            dest = (idx, value)
            out.uses.append(PathUse(idx, value, "write" if extract else "read_tree", whole))
    if extract:
        out.links.append(dest if dest is not None else (0, ALL))
    else:
        for i in ops:
            out.uses.append(_use(argv, i, "read_tree"))


def _zip(argv: tuple[str, ...], base: str, out: Operands) -> None:
    out.operand_kinds = ("read_tree", "write")
    if base == "unzip":
        ops, opts = _parse(argv, _f("-d", "-x"))
        dest = next(((o[0], o[2]) for o in opts if o[1] == "-d"), None)
        if ops:
            out.uses.append(_use(argv, ops[0], "read"))
        if dest is not None:
            out.uses.append(PathUse(dest[0], dest[1], "write"))
        out.links.append(dest if dest is not None else (0, ALL))
        return
    ops, opts = _parse(argv, _f("-b", "-n", "-t", "-tt", "-x", "-i", "-P", "--password"))
    names = {o[1] for o in opts}
    if ops:
        out.uses.append(_use(argv, ops[0], "write"))
    for i in ops[1:]:
        out.uses.append(_use(argv, i, "read_tree" if names & {"-r", "--recurse-paths"} else "read"))


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


def _git(argv: tuple[str, ...], out: Operands) -> None:
    out.operand_kinds = ("read", "write")
    sub, sub_index = git_subcommand(argv)
    i = 1
    while i < (sub_index or len(argv)):
        w = argv[i]
        if w == "-C" and i + 1 < len(argv):
            out.uses.append(_use(argv, i + 1, "cwd"))
        if w in GIT_VALUE_OPTIONS:
            i += 2
            continue
        i += 1
    if sub is None:
        return
    rest = (argv[0], *argv[sub_index + 1 :])
    ops, opts = _parse(rest, _GIT_SUB_VALUES)
    shift = sub_index  # rest[k] is argv[k + shift] for k >= 1

    def at(k: int) -> int:
        return k + shift

    names = {o[1] for o in opts}
    for k, name, value, whole in opts:
        if name in ("--output", "--output-directory") or (
            name == "-o" and sub in ("archive", "format-patch")
        ):
            out.uses.append(PathUse(at(k), value, "write", whole))
        elif name in ("-F", "--file") and sub in ("commit", "tag", "notes"):
            out.uses.append(PathUse(at(k), value, "read", whole))
        elif name in ("--separate-git-dir", "--template", "--reference"):
            out.uses.append(PathUse(at(k), value, "write" if name == "--separate-git-dir" else "read", whole))
    if sub == "init" and ops:
        out.uses.append(PathUse(at(ops[0]), rest[ops[0]], "write"))
    elif sub == "clone" and ops:
        if len(ops) >= 2:
            out.uses.append(PathUse(at(ops[1]), rest[ops[1]], "write"))
            out.links.append((at(ops[1]), rest[ops[1]]))
        else:
            out.links.append((0, ALL))
        if not re.match(r"^[a-z+]+://|^[^/]*:", rest[ops[0]]):
            out.uses.append(PathUse(at(ops[0]), rest[ops[0]], "read_tree"))
    elif sub == "worktree" and ops and rest[ops[0]] == "add" and len(ops) >= 2:
        out.uses.append(PathUse(at(ops[1]), rest[ops[1]], "write"))
        out.links.append((at(ops[1]), rest[ops[1]]))
    elif sub == "diff" and "--no-index" in names:
        for k in ops:
            out.uses.append(PathUse(at(k), rest[k], "read"))
    elif sub == "grep":
        _git_grep(rest, at, out)
    else:
        for k in ops:
            word = rest[k]
            if ":" in word and not word.startswith(":/"):
                _rev, _, path = word.partition(":")
                if path and not re.fullmatch(r"[A-Za-z0-9_.+-]*//.*", path):
                    out.uses.append(PathUse(at(k), path, "read", whole=False))  # REV:path shows a file
                continue
            out.uses.append(PathUse(at(k), word, "mention"))
    if sub in _GIT_TREE_WRITERS:
        out.links.append((0, ALL))


_GIT_GREP_VALUES: Final = _f(
    "-e", "-f", "-A", "-B", "-C", "-m", "--max-count", "--max-depth", "--threads", "--context",
    "--after-context", "--before-context", "--color", "--open-files-in-pager", "-O",
)  # fmt: skip


def _git_grep(rest: tuple[str, ...], at: Callable[[int], int], out: Operands) -> None:
    """``git grep [opts] [pattern] [tree…] [--] [pathspec…]``: the pathspecs are read (tracked files)."""
    split = rest.index("--") if "--" in rest else len(rest)
    ops, opts = _parse(rest[:split], _GIT_GREP_VALUES)
    if not ({o[1] for o in opts} & {"-e", "-f"}) and ops:
        ops = ops[1:]  # the pattern
    if split < len(rest):
        paths = list(range(split + 1, len(rest)))
    else:
        paths = ops  # trees and pathspecs: a tree name reads as a path that does not exist
    for k in paths:
        out.uses.append(PathUse(at(k), rest[k], "read_tree"))
    if not paths:
        out.uses.append(PathUse(0, ".", "read_tree", whole=False))


def _curl(argv: tuple[str, ...], base: str, out: Operands) -> None:
    out.operand_kinds = ("read", "write")
    if base == "curl":
        _, opts = _parse(
            argv,
            _f("-o", "--output", "-T", "--upload-file", "-K", "--config", "-d", "--data", "--data-binary",
               "--data-raw", "--data-urlencode", "-F", "--form", "-H", "--header", "-X", "--request", "-u",
               "--user", "-A", "--user-agent", "-e", "--referer", "-b", "--cookie", "-c", "--cookie-jar",
               "--output-dir", "-w", "--write-out", "--cacert", "--cert", "--key", "-x", "--proxy",
               "--connect-timeout", "-m", "--max-time", "--retry"),
        )  # fmt: skip
        for idx, name, value, whole in opts:
            if name in ("-o", "--output", "-c", "--cookie-jar", "--output-dir"):
                out.uses.append(PathUse(idx, value, "write", whole))
            elif name in ("-T", "--upload-file", "-K", "--config", "--cacert", "--cert", "--key"):
                out.uses.append(PathUse(idx, value, "read", whole))
            elif name in (
                "-d",
                "--data",
                "--data-binary",
                "--data-urlencode",
                "-F",
                "--form",
                "-b",
                "--cookie",
            ):
                m = re.search(r"[@<]([^;,]+)", value)
                if m:
                    out.uses.append(PathUse(idx, m.group(1), "read", whole=False))
        return
    _, opts = _parse(
        argv,
        _f("-O", "--output-document", "-o", "--output-file", "-a", "--append-output", "-P",
           "--directory-prefix", "-i", "--input-file", "-U", "--user-agent", "--header", "-t", "--tries",
           "-T", "--timeout", "--post-file", "--body-file", "--load-cookies", "--save-cookies"),
    )  # fmt: skip
    for idx, name, value, whole in opts:
        if name in ("-O", "--output-document", "-o", "--output-file", "-a", "--append-output", "-P",
                    "--directory-prefix", "--save-cookies"):  # fmt: skip
            if value != "-":
                out.uses.append(PathUse(idx, value, "write", whole))
        elif name in ("-i", "--input-file", "--post-file", "--body-file", "--load-cookies"):
            out.uses.append(PathUse(idx, value, "read", whole))


def operands(argv: tuple[str, ...]) -> Operands:
    """The path-naming words of one simple command (after wrappers are unwrapped)."""
    out = Operands()
    if not argv:
        return out
    base = os.path.basename(argv[0])
    if base in NON_FILE:
        return out
    if base == "find":
        _find(argv, out)
    elif base in ("cp", "mv", "ln", "link", "install", "rsync"):
        _transfer(argv, base, out)
    elif base == "dd":
        _dd(argv, out)
    elif base in ("sed", "gsed"):
        _sed(argv, out)
    elif base in ("awk", "gawk", "mawk", "nawk"):
        _awk(argv, out)
    elif base == "tar":
        _tar(argv, out)
    elif base in ("zip", "unzip"):
        _zip(argv, base, out)
    elif base == "git":
        _git(argv, out)
    elif base in ("curl", "wget"):
        _curl(argv, base, out)
    elif base in _READERS:
        _reader(argv, _READERS[base], out)
    else:
        out.known = False
        _unknown(argv, out)
    return out


#: Long options that name an output file whatever the program (``--output=/x`` writes ``/x``).
_OUTPUT_OPTION: Final = re.compile(
    r"--(?:output|out|outfile|out-file|output-file|output-dir|output-directory|log-file|logfile)"
)


def _unknown(argv: tuple[str, ...], out: Operands) -> None:
    """A program not in the tables: its words are mentions (an output option is a write)."""
    skip = False
    for i, w in enumerate(argv[1:], start=1):
        if skip:
            skip = False
            continue
        if w.startswith("--") and _OUTPUT_OPTION.fullmatch(w.split("=", 1)[0]):
            if "=" in w:
                out.uses.append(PathUse(i, w.split("=", 1)[1], "write", whole=False))
            elif i + 1 < len(argv):
                out.uses.append(_use(argv, i + 1, "write"))
                skip = True
        elif w.startswith("-"):
            if "=" in w:
                out.uses.append(PathUse(i, w.split("=", 1)[1], "mention", whole=False))
        elif w != "-":
            out.uses.append(_use(argv, i, "mention"))
