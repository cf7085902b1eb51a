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
from typing import Final

from .operand_model import ALL, Operands, PathUse, Transfer, UseKind, parse_options, use
from .operand_model import option_set as _f
from .operands_git import git
from .programs import awk_split, sed_split, tar_extracts
from .readers import READERS, ReaderSpec

__all__ = ["ALL", "NON_FILE", "Operands", "PathUse", "Transfer", "UseKind", "operands"]

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


def _reader(argv: tuple[str, ...], spec: ReaderSpec, out: Operands) -> None:
    ops, opts = parse_options(argv, spec.values)
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
            out.uses.append(use(argv, i, "write" if spec.second_writes and n == 1 else kind))
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
        out.uses.append(use(argv, j, "read_tree"))
    if not starts:
        out.uses.append(PathUse(0, ".", "read_tree", whole=False))


def _transfer(argv: tuple[str, ...], base: str, out: Operands) -> None:
    """``cp``/``mv``/``ln``/``install``/``rsync``: what is read, written or linked, and where it lands."""
    values = {"install": _INSTALL_VALUES, "rsync": _RSYNC_VALUES}.get(base, _CP_VALUES)
    out.operand_kinds = ("read_tree", "write")
    ops, opts = parse_options(argv, values)
    names = {o[1] for o in opts}
    target = next((o for o in opts if o[1] in ("-t", "--target-directory")), None)
    if base == "rsync":
        ops = _rsync_local_operands(argv, ops, opts, out)
    recursive = bool(names & {"-r", "-R", "--recursive", "-a", "--archive"})
    if base == "install" and "-d" in names:
        for i in ops:
            out.uses.append(use(argv, i, "write"))
        return
    found = _destination(argv, base, ops, names, target)
    if found is None:
        for i in ops:
            out.uses.append(use(argv, i, "read"))
        return
    dest, sources, into_dir = found
    src_kind = _source_kind(base, recursive)
    for i in sources:
        out.uses.append(use(argv, i, src_kind))
        if base == "mv":
            out.uses.append(use(argv, i, "read_tree"))  # what moves is exposed at its new name
    out.transfer = Transfer(
        sources=tuple((i, argv[i]) for i in sources),
        dest=dest,
        into_dir=into_dir,
        recursive=recursive or base in ("mv", "rsync"),
        makes_links=_makes_links(base, names, recursive),
    )


def _rsync_local_operands(
    argv: tuple[str, ...], ops: list[int], opts: list[tuple[int, str, str, bool]], out: Operands
) -> list[int]:
    """rsync's files named by options (recorded in ``out``) and its local operands (``host:path`` is remote)."""
    for idx, name, value, whole in opts:
        if name in ("--exclude-from", "--include-from", "--files-from", "--password-file") and value:
            out.uses.append(PathUse(idx, value, "read", whole))
        elif name in ("--log-file", "-T", "--temp-dir", "--backup-dir", "--partial-dir") and value:
            out.uses.append(PathUse(idx, value, "write", whole))
    return [i for i in ops if not re.match(r"^[^/]*:", argv[i])]


def _makes_links(base: str, names: set[str], recursive: bool) -> bool:
    """Whether the transfer may create links (``ln``, ``cp -s``/``-l``/``-P``/``-r``, ``mv``, ``rsync``)."""
    if base in ("ln", "link"):
        return True
    if base == "cp":
        return recursive or bool(
            names & {"-s", "-l", "--symbolic-link", "--link", "-P", "-d", "--no-dereference"}
        )
    return base in ("mv", "rsync")


def _destination(
    argv: tuple[str, ...],
    base: str,
    ops: list[int],
    names: set[str],
    target: tuple[int, str, str, bool] | None,
) -> tuple[tuple[int, str], list[int], bool | None] | None:
    """(destination, source indexes, whether it is a directory); ``None`` without a destination."""
    if target is not None:
        return (target[0], target[2]), ops, True
    if base in ("ln", "link") and len(ops) == 1:
        return (0, "."), ops, True
    if len(ops) < 2:
        return None
    dest = (ops[-1], argv[ops[-1]])
    sources = ops[:-1]
    into_dir: bool | None = None
    if "-T" in names or "--no-target-directory" in names:
        into_dir = False
    elif len(sources) > 1 or dest[1].endswith("/") or dest[1] in (".", "..") or base == "rsync":
        into_dir = True
    return dest, sources, into_dir


def _source_kind(base: str, recursive: bool) -> UseKind:
    """How a transfer uses its sources: linked (``ln``), moved away (``mv``) or read."""
    if base in ("ln", "link"):
        return "link"
    if base == "mv":
        return "write"
    return "read_tree" if recursive else "read"


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
            out.uses.append(use(argv, i, "write" if in_place else "read"))


def _awk(argv: tuple[str, ...], out: Operands) -> None:
    _, files, _ = awk_split(argv)
    for i in files:
        if argv[i] != "-":
            out.uses.append(use(argv, i, "read"))


def _tar(argv: tuple[str, ...], out: Operands) -> None:
    extract = tar_extracts(argv)
    out.operand_kinds = ("read_tree", "write")
    old_style = len(argv) > 1 and not argv[1].startswith("-")
    ops, opts = parse_options(
        argv, _f("-f", "--file", "-C", "--directory", "-T", "--files-from", "-X", "--exclude-from")
    )
    if old_style:
        ops = ops[1:]
        if "f" in argv[1] and ops:
            out.uses.append(use(argv, ops[0], "read" if extract else "write"))
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
            out.uses.append(use(argv, i, "read_tree"))


def _zip(argv: tuple[str, ...], base: str, out: Operands) -> None:
    out.operand_kinds = ("read_tree", "write")
    if base == "unzip":
        ops, opts = parse_options(argv, _f("-d", "-x"))
        dest = next(((o[0], o[2]) for o in opts if o[1] == "-d"), None)
        if ops:
            out.uses.append(use(argv, ops[0], "read"))
        if dest is not None:
            out.uses.append(PathUse(dest[0], dest[1], "write"))
        out.links.append(dest if dest is not None else (0, ALL))
        return
    ops, opts = parse_options(argv, _f("-b", "-n", "-t", "-tt", "-x", "-i", "-P", "--password"))
    names = {o[1] for o in opts}
    if ops:
        out.uses.append(use(argv, ops[0], "write"))
    for i in ops[1:]:
        out.uses.append(use(argv, i, "read_tree" if names & {"-r", "--recurse-paths"} else "read"))


def _curl(argv: tuple[str, ...], base: str, out: Operands) -> None:
    out.operand_kinds = ("read", "write")
    if base == "curl":
        _, opts = parse_options(
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
    _, opts = parse_options(
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


_Handler = Callable[[tuple[str, ...], Operands], None]
_NamedHandler = Callable[[tuple[str, ...], str, Operands], None]


def operands(argv: tuple[str, ...]) -> Operands:
    """The path-naming words of one simple command (after wrappers are unwrapped)."""
    out = Operands()
    if not argv:
        return out
    base = os.path.basename(argv[0])
    if base in NON_FILE:
        return out
    handler = _PROGRAMS.get(base)
    named = _PROGRAM_FAMILIES.get(base)
    if handler is not None:
        handler(argv, out)
    elif named is not None:
        named(argv, base, out)
    elif base in READERS:
        _reader(argv, READERS[base], out)
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
                out.uses.append(use(argv, i + 1, "write"))
                skip = True
        elif w.startswith("-"):
            if "=" in w:
                out.uses.append(PathUse(i, w.split("=", 1)[1], "mention", whole=False))
        elif w != "-":
            out.uses.append(use(argv, i, "mention"))


#: Programs with a reader of their own.
_PROGRAMS: Final[dict[str, _Handler]] = {
    "find": _find,
    "dd": _dd,
    **dict.fromkeys(("sed", "gsed"), _sed),
    **dict.fromkeys(("awk", "gawk", "mawk", "nawk"), _awk),
    "tar": _tar,
    "git": git,
}
#: Families of programs sharing a reader that is told which one it reads.
_PROGRAM_FAMILIES: Final[dict[str, _NamedHandler]] = {
    **dict.fromkeys(("cp", "mv", "ln", "link", "install", "rsync"), _transfer),
    **dict.fromkeys(("zip", "unzip"), _zip),
    **dict.fromkeys(("curl", "wget"), _curl),
}
